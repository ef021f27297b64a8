# Read into llama.cpp's own configure by scripts/build_llama_server.sh
# (CMAKE_PROJECT_llama.cpp_INCLUDE), to run once its targets exist. Most of llama-server's build
# is many small files that each parse the same large headers: llama's model graphs (src/models,
# about 150 files), mtmd's (tools/mtmd/models), common and the server. Compiled in unity batches
# they take half the time (116 s against 236 s on 2 cores); the files that define a file-local
# name another file of their target also defines, or that must not see the target's internal
# headers (mtmd-helper), stay out of the batches. ggml keeps its per-file build.
cmake_language(DEFER DIRECTORY ${CMAKE_SOURCE_DIR} CALL tandem_llama_unity)

function(tandem_llama_unity)
  set_target_properties(llama mtmd llama-common server-context llama-server-impl
    PROPERTIES UNITY_BUILD ON UNITY_BUILD_BATCH_SIZE 16)
  get_target_property(llama_dir llama SOURCE_DIR)
  get_target_property(mtmd_dir mtmd SOURCE_DIR)
  get_target_property(common_dir llama-common SOURCE_DIR)
  set_source_files_properties(${llama_dir}/models/gemma4.cpp
    TARGET_DIRECTORY llama PROPERTIES SKIP_UNITY_BUILD_INCLUSION ON)
  set_source_files_properties(${mtmd_dir}/mtmd-helper.cpp ${mtmd_dir}/mtmd-helper-gen.cpp
    TARGET_DIRECTORY mtmd PROPERTIES SKIP_UNITY_BUILD_INCLUSION ON)
  set_source_files_properties(${common_dir}/chat.cpp ${common_dir}/json.cpp
    TARGET_DIRECTORY llama-common PROPERTIES SKIP_UNITY_BUILD_INCLUSION ON)
endfunction()

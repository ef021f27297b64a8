#pragma once

#include <string>
#include <string_view>

// Where a test finds this checkout's files and this build's programs. The values live in one
// generated file (test_paths_values.cc in the build tree), not on every test's command line: a
// test object then does not depend on where the checkout lies, and ccache reuses it across clones
// (CMakeLists.txt). Safe to call during static initialisation.
namespace tandem::testing {

// The checkout's root (tests/golden, policies/, examples/, ...).
const char* SourceDir();
// SourceDir() followed by `relative`, which starts with '/': SourcePath("/policies/default.yaml").
std::string SourcePath(std::string_view relative);

// This build's programs.
const char* WorkerBin();
const char* GatewayBin();
const char* CtlBin();
const char* MakeCheckpointBin();
// The build's small random-weights checkpoint of `arch` (qwen3_5_moe or nemotron_h: hidden 64,
// 4 layers, 4 experts, seed 7, the Qwen3 tokenizer), written at build time (tests/CMakeLists.txt).
std::string NativeCheckpoint(std::string_view arch);

// Found at configure time; empty when not found (the tests that need them skip).
const char* PromtoolBin();
const char* PrometheusBin();

}  // namespace tandem::testing

// Link-time stand-ins for the GPU kit only: scripts/gpu_kit/static_link.py links these instead
// of two shared libraries that alone would exceed the kit's 60 MiB (docs/gpu-kit.md).
#include <unicode/udata.h>
#include <unicode/utypes.h>

#include <cstdint>

// OpenBLAS (36 MB: a kernel set for every x86 CPU) is replaced by the reference BLAS, because on
// the GPU machine the CPU path only runs the tiny golden models; there is no thread count to set.
extern "C" void openblas_set_num_threads(int) {}

// ICU's data library (31 MB: locales, collation, converters) is replaced by an empty table, ICU's
// own "stubdata" (icu4c/source/stubdata). The tokenizer uses character properties and NFC only,
// and ICU compiles those into libicuuc itself.
namespace {
struct IcuDataHeader {
  uint16_t header_size;
  uint8_t magic1, magic2;
  UDataInfo info;
  char padding[8];
  uint32_t count, reserved;
  int fake_name_and_data[4];
};
}  // namespace

extern "C" U_EXPORT const IcuDataHeader U_ICUDATA_ENTRY_POINT = {
    32,
    0xda,
    0x27,
    {sizeof(UDataInfo),
     0,
     U_IS_BIG_ENDIAN,
     U_CHARSET_FAMILY,
     sizeof(UChar),
     0,
     {0x54, 0x6f, 0x43, 0x50},  // "ToCP": a table of contents
     {1, 0, 0, 0},
     {0, 0, 0, 0}},
    {0, 0, 0, 0, 0, 0, 0, 0},
    0,  // no entries
    0,
    {0, 0, 0, 0}};

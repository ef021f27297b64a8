#include "workers/model/architecture.h"

#include "absl/strings/str_cat.h"

namespace tandem::workers::model {

absl::string_view ArchitectureName(Architecture architecture) {
  switch (architecture) {
    case Architecture::kQwen35Moe:
      return "qwen3_5_moe";
    case Architecture::kNemotronH:
      return "nemotron_h";
  }
  return "unknown";
}

absl::StatusOr<Architecture> ParseArchitecture(absl::string_view name) {
  for (const Architecture a : {Architecture::kQwen35Moe, Architecture::kNemotronH}) {
    if (name == ArchitectureName(a)) return a;
  }
  return absl::InvalidArgumentError(
      absl::StrCat("architecture '", name, "': expected qwen3_5_moe or nemotron_h"));
}

}  // namespace tandem::workers::model

#pragma once

#include "tools/bench/driver.h"

namespace tandem::bench {

// One streamed POST /v1/chat/completions (--target=openai: a gateway's --http_listen, or any
// OpenAI-compatible engine such as llama-server, for side-by-side runs of the same request). It
// runs on a thread of its own with blocking libcurl, so it suits the concurrencies of engine
// comparisons, not open-loop floods; it reports to the driver like the gRPC calls: the first and
// last text chunk, the gaps between chunks, and the usage's completion tokens.
void StartHttpStreamCall(Driver* driver, Clock::time_point scheduled);

}  // namespace tandem::bench

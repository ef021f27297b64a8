// libFuzzer target: what an engine server sends a worker in front of it (untrusted: another
// team's server, or anything at --upstream_url). The bytes go through the SSE parser and the
// chat-stream decoder of every shipped profile, thinking on and off; split in two at a point
// the input chooses, as the network may split them; and through the engine-metrics reader.
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "common/prometheus_text.h"
#include "workers/upstream/chat_stream_decoder.h"
#include "workers/upstream/engine_profile.h"
#include "workers/upstream/engine_signals.h"
#include "workers/upstream/sse_parser.h"

namespace {

using tandem::workers::upstream::ChatStreamDecoder;
using tandem::workers::upstream::EngineProfile;
using tandem::workers::upstream::SseParser;

const std::vector<EngineProfile>& Profiles() {
  static const auto* profiles = [] {
    auto* p = new std::vector<EngineProfile>();
    for (const std::string& name : tandem::workers::upstream::BuiltinProfileNames()) {
      p->push_back(*tandem::workers::upstream::LoadEngineProfile(name));
    }
    return p;
  }();
  return *profiles;
}

void Decode(const EngineProfile& profile, bool thinking, absl::string_view bytes, size_t split) {
  SseParser parser(4096);
  ChatStreamDecoder decoder(profile, thinking);
  std::vector<SseParser::Event> events;
  for (absl::string_view piece : {bytes.substr(0, split), bytes.substr(split)}) {
    events.clear();
    if (!parser.Feed(piece, &events).ok()) return;
    for (const auto& e : events) {
      ChatStreamDecoder::Piece out;
      if (decoder.done() || !decoder.Feed(e.data, &out).ok()) return;
    }
  }
  ChatStreamDecoder::Piece tail;
  (void)decoder.Finish(&tail);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const size_t split = data[0] % size;
  absl::string_view bytes(reinterpret_cast<const char*>(data) + 1, size - 1);
  for (const EngineProfile& p : Profiles()) {
    Decode(p, true, bytes, split);
    Decode(p, false, bytes, split);
  }
  auto samples = tandem::ParsePrometheusText(std::string_view(bytes.data(), bytes.size()));
  if (samples.ok()) {
    for (const EngineProfile& p : Profiles())
      (void)tandem::workers::upstream::ReadEngineSignals(*samples, p);
  }
  return 0;
}

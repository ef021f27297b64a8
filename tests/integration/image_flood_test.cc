// A flood of hostile images at a real qwen worker (native engine, random weights, vision):
// GIF pairs declaring 8192x8192 screens, tiny PNGs with 8192x8192 headers, truncated JPEGs
// claiming 8192x8192 and pairs of valid 8192x8192 PNGs, the requests that used to stall gRPC's
// threads for seconds and cost ~200 MB each. While they run, another client's text requests
// (through the gateway) and health checks (straight to the worker) must keep their idle
// latency, the gateway must keep the worker ready, and the worker's peak memory must not jump.
#include <grpcpp/grpcpp.h>
#include <zlib.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "grpc/health/v1/health.grpc.pb.h"
#include "gtest/gtest.h"
#include "tandem/v1/gateway.grpc.pb.h"
#include "tandem/v1/worker.grpc.pb.h"
#include "tests/support/requests.h"
#include "tests/support/stack.h"
#include "tests/support/test_paths.h"

namespace tandem::testing {
namespace {

using Seconds = std::chrono::duration<double>;

void PutBe32(std::string* s, size_t at, uint32_t v) {
  for (int i = 0; i < 4; ++i) (*s)[at + i] = static_cast<char>((v >> (24 - 8 * i)) & 0xFF);
}

std::string PngChunk(const std::string& type, const std::string& data) {
  std::string out(4, '\0');
  PutBe32(&out, 0, static_cast<uint32_t>(data.size()));
  out += type + data;
  const std::string covered = out.substr(4);
  std::string crc(4, '\0');
  PutBe32(&crc, 0,
          static_cast<uint32_t>(crc32(0, reinterpret_cast<const Bytef*>(covered.data()),
                                      static_cast<uInt>(covered.size()))));
  return out + crc;
}

// An 8-bit RGB PNG of width x height whose IDAT is `idat`.
std::string Png(uint32_t width, uint32_t height, const std::string& idat) {
  std::string ihdr(13, '\0');
  PutBe32(&ihdr, 0, width);
  PutBe32(&ihdr, 4, height);
  ihdr[8] = 8;
  ihdr[9] = 2;
  return std::string("\x89PNG\r\n\x1a\n", 8) + PngChunk("IHDR", ihdr) + PngChunk("IDAT", idat) +
         PngChunk("IEND", "");
}

// The deflated rows of a black side x side RGB image (deflated a row at a time: no buffer of
// the whole), ~195 KB for 8192.
std::string BlackIdat(uint32_t side) {
  z_stream z = {};
  EXPECT_EQ(deflateInit(&z, 9), Z_OK);
  const std::vector<uint8_t> row(1 + size_t{side} * 3, 0);  // filter byte 0, black pixels
  std::string out;
  std::vector<uint8_t> chunk(1 << 16);
  for (uint32_t y = 0; y < side; ++y) {
    z.next_in = const_cast<Bytef*>(row.data());
    z.avail_in = static_cast<uInt>(row.size());
    const int flush = y + 1 == side ? Z_FINISH : Z_NO_FLUSH;
    do {
      z.next_out = chunk.data();
      z.avail_out = static_cast<uInt>(chunk.size());
      deflate(&z, flush);
      out.append(reinterpret_cast<char*>(chunk.data()), chunk.size() - z.avail_out);
    } while (z.avail_out == 0 || (flush == Z_FINISH && z.avail_in > 0));
  }
  deflateEnd(&z);
  return out;
}

// 35 bytes: an 8192x8192 logical screen, a 2-colour table and a 1x1 frame.
std::string GifWithHugeScreen() {
  std::string gif = "GIF89a";
  gif += std::string("\x00\x20\x00\x20\x80\x00\x00", 7);  // 8192x8192, table of 2, bg 0
  gif += std::string("\x00\x00\x00\xff\xff\xff", 6);      // black, white
  gif += std::string("\x2c\x00\x00\x00\x00\x01\x00\x01\x00\x00", 10);  // 1x1 at 0,0
  gif += std::string("\x02\x02\x4c\x01\x00", 5);  // LZW size 2; clear, 1, end; block end
  gif += ";";
  return gif;
}

// A small baseline JPEG (the repository's test image) with its SOF0 size set to 8192x8192,
// cut to `size` bytes.
std::string TruncatedJpegClaimingHugeSize(size_t size) {
  std::ifstream in(tandem::testing::SourcePath("/tests/images/checker_96x64.jpg"),
                   std::ios::binary);
  std::string jpeg((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const size_t sof = jpeg.find("\xFF\xC0");
  EXPECT_NE(sof, std::string::npos);
  if (sof == std::string::npos) return jpeg;
  for (size_t at : {sof + 5, sof + 7}) {
    jpeg[at] = 0x20;
    jpeg[at + 1] = 0;
  }
  jpeg.resize(std::min(jpeg.size(), size));
  return jpeg;
}

// The 99th percentile (nearest rank) of `seconds`.
double P99(std::vector<double> seconds) {
  if (seconds.empty()) return 0;
  std::sort(seconds.begin(), seconds.end());
  const size_t rank = (seconds.size() * 99 + 99) / 100;
  return seconds[std::min(seconds.size(), std::max<size_t>(rank, 1)) - 1];
}

// VmHWM (peak resident memory) of `pid`, in bytes; -1 if unreadable.
int64_t PeakRss(pid_t pid) {
  std::ifstream in(absl::StrCat("/proc/", pid, "/status"));
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("VmHWM:", 0) != 0) continue;
    int64_t kb = 0;
    std::string digits;
    for (char c : line) {
      if (c >= '0' && c <= '9') digits += c;
    }
    if (absl::SimpleAtoi(digits, &kb)) return kb * 1024;
  }
  return -1;
}

class ImageFloodTest : public ::testing::Test {
 protected:
  void SetUp() override {
    // One image thread and a queue of two: eight flooders overfill it, so admission refuses.
    auto w =
        StartWorker("qwen", {"--engine=native", "--checkpoint=" + NativeCheckpoint("qwen3_5_moe"),
                             "--memory_budget=268435456", "--native_threads=1", "--image_threads=1",
                             "--image_queue=2"});
    ASSERT_TRUE(w.ok()) << w.status();
    worker_ = std::move(*w);
    // The routing policy names both models; nemotron is a synthetic stand-in here.
    auto n = StartWorker("nemotron", {"--synthetic_time_scale=0"});
    ASSERT_TRUE(n.ok()) << n.status();
    nemotron_ = std::move(*n);
    auto g = StartGateway({"qwen=" + worker_.grpc_address, "nemotron=" + nemotron_.grpc_address});
    ASSERT_TRUE(g.ok()) << g.status();
    gateway_ = std::move(*g);
    ASSERT_TRUE(WaitForHealth(gateway_.grpc_address, "model/qwen", true).ok());
    gateway_stub_ = tandem::v1::Gateway::NewStub(
        grpc::CreateChannel(gateway_.grpc_address, grpc::InsecureChannelCredentials()));
    auto worker_channel =
        grpc::CreateChannel(worker_.grpc_address, grpc::InsecureChannelCredentials());
    health_stub_ = grpc::health::v1::Health::NewStub(worker_channel);
  }

  // One normal text request through the gateway; its latency in seconds (-1 if it failed).
  double NormalRequest() {
    tandem::v1::GenerateRequest req = Prompt("How are you today?", 4);
    req.mutable_hints()->set_model("qwen");
    grpc::ClientContext ctx;
    Deadline(&ctx, std::chrono::seconds(30));
    tandem::v1::GenerateResponse resp;
    const auto start = std::chrono::steady_clock::now();
    const grpc::Status s = gateway_stub_->Generate(&ctx, req, &resp);
    if (!s.ok()) return -1;
    return Seconds(std::chrono::steady_clock::now() - start).count();
  }

  // One grpc.health.v1 Check straight to the worker with the gateway's probe deadline (1 s);
  // its latency (-1 unless SERVING in time).
  double HealthCheck() {
    grpc::health::v1::HealthCheckRequest req;
    grpc::health::v1::HealthCheckResponse resp;
    grpc::ClientContext ctx;
    Deadline(&ctx, std::chrono::seconds(1));
    const auto start = std::chrono::steady_clock::now();
    const grpc::Status s = health_stub_->Check(&ctx, req, &resp);
    if (!s.ok() || resp.status() != grpc::health::v1::HealthCheckResponse::SERVING) return -1;
    return Seconds(std::chrono::steady_clock::now() - start).count();
  }

  // Whether the gateway reports the worker ready now.
  bool GatewaySeesReady() {
    auto body = HttpGet(gateway_.metrics_address, "/metrics");
    if (!body.ok()) return false;
    auto v = MetricValue(*body, "tandem_gateway_endpoint_ready", {{"model_name", "qwen"}});
    return v.ok() && *v == 1;
  }

  struct Latencies {
    std::vector<double> requests;
    std::vector<double> health;
    int failures = 0;
    int not_ready = 0;
  };
  // `rounds` of one normal request and five health checks, with a readiness sample each.
  Latencies Measure(int rounds) {
    Latencies out;
    for (int i = 0; i < rounds; ++i) {
      const double r = NormalRequest();
      if (r < 0) {
        ++out.failures;
      } else {
        out.requests.push_back(r);
      }
      for (int k = 0; k < 5; ++k) {
        const double h = HealthCheck();
        if (h < 0) {
          ++out.failures;
        } else {
          out.health.push_back(h);
        }
      }
      if (!GatewaySeesReady()) ++out.not_ready;
    }
    return out;
  }

  Server worker_;
  Server nemotron_;
  Server gateway_;
  std::unique_ptr<tandem::v1::Gateway::Stub> gateway_stub_;
  std::unique_ptr<grpc::health::v1::Health::Stub> health_stub_;
};

tandem::v1::WorkerGenerateRequest WithImages(const std::vector<std::string>& images,
                                             const std::string& mime) {
  tandem::v1::WorkerGenerateRequest req;
  auto* m = req.add_messages();
  m->set_role("user");
  m->add_content()->set_text("What is this?");
  for (const std::string& data : images) {
    auto* image = m->add_content()->mutable_image();
    image->set_data(data);
    image->set_mime_type(mime);
  }
  req.mutable_sampling()->set_max_tokens(4);
  return req;
}

TEST_F(ImageFloodTest, HostileImagesKeepHealthAndOtherCallersFast) {
  const std::string gif = GifWithHugeScreen();
  ASSERT_EQ(gif.size(), 35u);
  // 69 bytes: an 8192x8192 header and 12 bytes of IDAT.
  const std::string tiny_png =
      Png(8192, 8192, std::string("\x78\xda\x63\x60\x60\x60\x00\x00\x00\x04\x00\x01", 12));
  ASSERT_EQ(tiny_png.size(), 69u);
  const std::string big_png = Png(8192, 8192, BlackIdat(8192));
  const std::vector<tandem::v1::WorkerGenerateRequest> hostile = {
      WithImages({gif, gif}, "image/gif"),
      WithImages({tiny_png}, "image/png"),
      WithImages({TruncatedJpegClaimingHugeSize(1000)}, "image/jpeg"),
      WithImages({TruncatedJpegClaimingHugeSize(400)}, "image/jpg"),
      WithImages({big_png, big_png}, "image/png"),
  };
  // Warm up the paths measured, then the idle baseline.
  Measure(3);
  const Latencies idle = Measure(30);
  ASSERT_EQ(idle.failures, 0);
  const int64_t peak_before = PeakRss(worker_.process->pid());

  std::atomic<bool> stop{false};
  absl::Mutex mu;
  std::map<int, int> codes;  // grpc status code -> count
  std::vector<std::thread> flooders;
  for (int t = 0; t < 8; ++t) {
    flooders.emplace_back([&, t] {
      auto stub = tandem::v1::Worker::NewStub(
          grpc::CreateChannel(worker_.grpc_address, grpc::InsecureChannelCredentials()));
      for (size_t i = t; !stop.load(); ++i) {
        grpc::ClientContext ctx;
        Deadline(&ctx, std::chrono::seconds(30));
        auto reader = stub->Generate(&ctx, hostile[i % hostile.size()]);
        tandem::v1::WorkerGenerateChunk chunk;
        while (reader->Read(&chunk)) {
        }
        const grpc::Status s = reader->Finish();
        {
          absl::MutexLock l(&mu);
          ++codes[s.error_code()];
        }
        // Paced (a flood, not a CPU benchmark of refusals): the load on 2 cores stays what
        // eight hostile callers send, not what eight tight loops can.
        absl::SleepFor(absl::Milliseconds(20));
      }
    });
  }
  const Latencies flood = Measure(30);
  stop = true;
  for (std::thread& t : flooders) t.join();
  const int64_t peak_after = PeakRss(worker_.process->pid());

  const double idle_request = P99(idle.requests), flood_request = P99(flood.requests);
  const double idle_health = P99(idle.health), flood_health = P99(flood.health);
  std::printf(
      "p99 normal request: idle %.1f ms, flood %.1f ms; p99 health check: idle %.1f ms, flood "
      "%.1f ms; worker peak RSS %.1f -> %.1f MiB\n",
      idle_request * 1e3, flood_request * 1e3, idle_health * 1e3, flood_health * 1e3,
      peak_before / 1048576.0, peak_after / 1048576.0);
  int total = 0;
  for (const auto& [code, n] : codes) {
    std::printf("flood status %d: %d\n", code, n);
    total += n;
  }
  // Every hostile request is refused, as invalid or (the pool full) as exhausted; none hangs.
  EXPECT_GE(total, 40);
  for (const auto& [code, n] : codes) {
    EXPECT_TRUE(code == grpc::StatusCode::INVALID_ARGUMENT ||
                code == grpc::StatusCode::RESOURCE_EXHAUSTED)
        << "status " << code << " x" << n;
  }
  EXPECT_GT(codes[grpc::StatusCode::INVALID_ARGUMENT], 0);
  // Nobody else notices: no failure, the worker never unready, p99 within 2x of idle (with
  // 50 ms of slack for this 2-core VM's scheduling noise).
  EXPECT_EQ(flood.failures, 0);
  EXPECT_EQ(flood.not_ready, 0);
  // No 200 MB canvas for headers that lie (a valid 8192x8192 RGB buffer is 192 MiB).
  ASSERT_GT(peak_before, 0);
  // The latency and memory bounds hold for the optimized build. Under ASan or TSan every
  // process runs several times slower, so the flooders' protobuf parsing alone saturates this
  // VM's 2 cores (CI saw p99 27 -> 249 ms), and ASan's quarantine keeps up to 256 MiB of freed
  // requests resident (peak +187 MiB; +<64 MiB with quarantine_size_mb=8). What a sanitizer
  // build checks here is that nothing fails, nothing goes unready and no report appears.
  if (!TANDEM_SANITIZED) {
    EXPECT_LE(flood_request, std::max(2 * idle_request, idle_request + 0.05));
    EXPECT_LE(flood_health, std::max(2 * idle_health, idle_health + 0.05));
    EXPECT_LT(peak_after - peak_before, 64ll << 20);
  }

  // The pool's size is exported, and the worker still answers an ordinary request.
  auto metrics = HttpGet(worker_.metrics_address, "/metrics");
  ASSERT_TRUE(metrics.ok()) << metrics.status();
  auto threads = MetricValue(*metrics, "tandem_worker_image_pool_threads", {});
  ASSERT_TRUE(threads.ok()) << threads.status();
  EXPECT_EQ(*threads, 1);
  auto queue = MetricValue(*metrics, "tandem_worker_image_pool_queue_capacity", {});
  ASSERT_TRUE(queue.ok()) << queue.status();
  EXPECT_EQ(*queue, 2);
  EXPECT_GE(NormalRequest(), 0);
}

}  // namespace
}  // namespace tandem::testing

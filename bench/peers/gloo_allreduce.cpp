// gloo-allreduce: one rank of a Gloo all-reduce benchmark. Start W of these (ranks
// 0..W-1) with the same --store DIR (an empty directory, one per run): they rendezvous
// through gloo::rendezvous::FileStore, connect a full mesh over Gloo's TCP transport on
// --host (default 127.0.0.1; each rank's own address when ranks sit on different hosts),
// then each iteration run a barrier and time gloo::allreduce (ring) of S bytes of
// float32, sum, out of place.
//
//   gloo-allreduce --rank R --size W --bytes S --iters N --warmup K --store DIR [--host ADDR]
//
// Prints on stdout:  RANK r t_1 ... t_N   (milliseconds)   then   VERIFIED 1
// Every element of every result is checked against the exact sum (inputs are small
// integers); a wrong element is reported on stderr and the exit status is 3.

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include <gloo/allreduce.h>
#include <gloo/barrier.h>
#include <gloo/math.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/file_store.h>
#include <gloo/rendezvous/prefix_store.h>
#include <gloo/transport/tcp/device.h>

namespace {

uint64_t parse_bytes(const std::string& s) {
  size_t pos = 0;
  double v = std::stod(s, &pos);
  uint64_t m = 1;
  if (pos < s.size()) {
    char u = s[pos];
    if (u == 'K' || u == 'k')
      m = 1ull << 10;
    else if (u == 'M' || u == 'm')
      m = 1ull << 20;
    else if (u == 'G' || u == 'g')
      m = 1ull << 30;
    else if (u != 'B')
      throw std::invalid_argument("bad byte size: " + s);
  }
  return static_cast<uint64_t>(v * static_cast<double>(m));
}

// Rank r's input at element i in iteration it: a small integer, so sums are exact.
inline float input(int r, size_t i, int it) {
  return static_cast<float>((i + 7u * unsigned(r) + 3u * unsigned(it)) & 15u);
}

} // namespace

int main(int argc, char** argv) {
  int rank = -1, size = 0, iters = 10, warmup = 2;
  uint64_t bytes = 4u << 20;
  std::string store_dir;
  std::string host = "127.0.0.1";
  try {
    for (int i = 1; i < argc; ++i) {
      std::string a = argv[i];
      auto next = [&]() -> std::string {
        if (i + 1 >= argc)
          throw std::invalid_argument(a + " needs a value");
        return argv[++i];
      };
      if (a == "--rank")
        rank = std::stoi(next());
      else if (a == "--size")
        size = std::stoi(next());
      else if (a == "--bytes")
        bytes = parse_bytes(next());
      else if (a == "--iters")
        iters = std::stoi(next());
      else if (a == "--warmup")
        warmup = std::stoi(next());
      else if (a == "--store")
        store_dir = next();
      else if (a == "--host")
        host = next();
      else
        throw std::invalid_argument("unknown argument " + a);
    }
    if (size < 1 || rank < 0 || rank >= size || bytes == 0 || bytes % 4 || iters < 1
        || warmup < 0 || store_dir.empty())
      throw std::invalid_argument(
        "need --rank R --size W (0 <= R < W), --bytes (multiple "
        "of 4), --iters >= 1, --store DIR");
  } catch (const std::exception& e) {
    std::fprintf(stderr, "gloo-allreduce: %s\n", e.what());
    return 2;
  }

  try {
    gloo::transport::tcp::attr attr;
    attr.hostname = host;
    attr.ai_family = AF_INET;
    auto dev = gloo::transport::tcp::CreateDevice(attr);
    gloo::rendezvous::FileStore file_store(store_dir);
    gloo::rendezvous::PrefixStore store("gloo-allreduce", file_store);
    auto context = std::make_shared<gloo::rendezvous::Context>(rank, size);
    context->setTimeout(std::chrono::seconds(240));
    context->connectFullMesh(store, dev);

    const size_t n = bytes / 4;
    std::vector<float> in(n), out(n);
    std::vector<double> times;
    times.reserve(iters);
    uint32_t tag = 0;
    for (int it = 0; it < warmup + iters; ++it) {
      float expect[16];
      for (int k = 0; k < 16; ++k) {
        expect[k] = 0.0f;
        for (int r = 0; r < size; ++r)
          expect[k] += float((k + 7 * r) & 15);
      }
      for (size_t i = 0; i < n; ++i)
        in[i] = input(rank, i, it);
      std::memset(out.data(), 0xff, bytes); // NaN: a result never written cannot pass

      gloo::BarrierOptions bopts(context);
      bopts.setTag(tag++);
      gloo::barrier(bopts);

      auto t0 = std::chrono::steady_clock::now();
      gloo::AllreduceOptions opts(context);
      opts.setAlgorithm(gloo::AllreduceOptions::Algorithm::RING);
      opts.setInput(in.data(), n);
      opts.setOutput(out.data(), n);
      opts.setReduceFunction(
        static_cast<void (*)(void*, const void*, const void*, size_t)>(
          &gloo::sum<float>));
      opts.setTag(tag++);
      gloo::allreduce(opts);
      auto t1 = std::chrono::steady_clock::now();
      if (it >= warmup)
        times.push_back(std::chrono::duration<double, std::milli>(t1 - t0).count());

      for (size_t i = 0; i < n; ++i) {
        float e = expect[(i + 3u * unsigned(it)) & 15u];
        if (out[i] != e) {
          std::fprintf(stderr,
                       "gloo-allreduce: rank %d: iteration %d: element %zu is %.9g, "
                       "expected %.9g\n",
                       rank, it, i, double(out[i]), double(e));
          return 3;
        }
      }
    }
    std::printf("RANK %d", rank);
    for (double t : times)
      std::printf(" %.4f", t);
    std::printf("\nVERIFIED 1\n");
    std::fflush(stdout);
    // Leave together, so no rank tears its pairs down while another still reads.
    gloo::BarrierOptions bopts(context);
    bopts.setTag(tag++);
    gloo::barrier(bopts);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "gloo-allreduce: rank %d: %s\n", rank, e.what());
    return 2;
  }
  return 0;
}

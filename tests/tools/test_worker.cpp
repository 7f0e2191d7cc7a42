// rw-test-worker: one worker of the integration tests' fixture job. Joins, initialises
// (rank 0), runs --steps push_pull steps on every tensor at once and writes the final
// parameters of every tensor, in order, as raw float32 to --out.

#include <fstream>
#include <future>
#include <iostream>

#include <CLI/CLI.hpp>

#include "rackweave/worker.hpp"
#include "tests/tools/fixture_job.hpp"

int main(int argc, char** argv) {
  std::string connect, job, optimizer = "sum", out, transport = "auto";
  uint32_t rank = 0, workers = 1, steps = 3;
  CLI::App app{"rw-test-worker: one worker of the test fixture job"};
  app.add_option("--connect", connect)->required();
  app.add_option("--job", job)->required();
  app.add_option("--rank", rank)->required();
  app.add_option("--workers", workers)->required();
  app.add_option("--optimizer", optimizer);
  app.add_option("--steps", steps);
  app.add_option("--out", out)->required();
  app.add_option("--transport", transport);
  CLI11_PARSE(app, argc, argv);

  auto kind = rw::parse_optimizer_kind(optimizer);
  if (!kind) {
    std::cerr << "unknown optimizer " << optimizer << "\n";
    return 2;
  }
  rw::worker_options o;
  o.connect = connect;
  o.rank = rank;
  o.job = rw::testing::fixture_job(job, workers, *kind);
  o.request_timeout = std::chrono::seconds(30);
  o.transport = transport;
  try {
    rw::worker w{o};
    if (transport != "auto" && transport != w.transport()) {
      std::cerr << "asked for " << transport << ", got " << w.transport() << "\n";
      return 4;
    }
    auto& tensors = o.job.tensors;
    std::vector<std::vector<float>> params(tensors.size());
    for (uint32_t t = 0; t < tensors.size(); ++t) {
      params[t].resize(tensors[t].elements);
      if (!tensors[t].has_init)
        continue;
      if (rank == 0) {
        auto init = rw::testing::fixture_init(t, tensors[t].elements);
        w.init(tensors[t].name, init.data()).get();
      }
      // Every rank reads version 0; non-zero ranks wait for rank 0's init.
      w.pull(tensors[t].name, params[t].data(), 0).get();
    }
    for (uint32_t s = 0; s < steps; ++s) {
      std::vector<std::vector<float>> grads;
      std::vector<std::future<void>> pending;
      for (uint32_t t = 0; t < tensors.size(); ++t)
        grads.push_back(rw::testing::fixture_gradient(rank, s, t, tensors[t].elements));
      for (uint32_t t = 0; t < tensors.size(); ++t)
        pending.push_back(w.push_pull(tensors[t].name, grads[t].data(), params[t].data()));
      for (auto& f : pending)
        f.get();
    }
    w.close();
    std::ofstream file{out, std::ios::binary};
    for (auto& p : params)
      file.write(reinterpret_cast<const char*>(p.data()),
                 static_cast<std::streamsize>(p.size() * sizeof(float)));
    return file.good() ? 0 : 3;
  } catch (const rw::error& e) {
    std::cerr << "rank " << rank << ": " << e.what() << " (" << rw::to_string(e.code())
              << ")\n";
    return 2;
  }
}

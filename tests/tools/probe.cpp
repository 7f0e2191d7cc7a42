// rw-test-probe: a legitimate worker that tries what no worker may do. It joins its
// own job (--job, one worker, proving --token), then
//  - sends pulls and pushes naming job --target-job's id, for guessed tensors and
//    chunks: each must be refused (unknown_job), never answered with data;
//  - with --steal NAME, says hello to job NAME with its own token: refused
//    (unauthorized).
// Prints one line per attempt; exits 0 if everything was refused, 1 if anything got
// through, 2 on a usage or connection problem.

#include <iostream>

#include <CLI/CLI.hpp>

#include "tests/support/raw_client.hpp"
#include "tests/tools/fixture_job.hpp"

using namespace rw;
using protocol::frame_kind;

int main(int argc, char** argv) {
  std::string connect, job, token, steal;
  uint32_t target = 0;
  CLI::App app{"rw-test-probe: tries to reach another job's chunks"};
  app.add_option("--connect", connect)->required();
  app.add_option("--job", job, "the probe's own job (1 worker)")->required();
  app.add_option("--token", token, "its token")->required();
  app.add_option("--target-job", target, "the id of the job to reach into")->required();
  app.add_option("--steal", steal, "a job to say hello to with the probe's token");
  CLI11_PARSE(app, argc, argv);

  int leaks = 0;
  try {
    testing::raw_client own{connect};
    auto own_id = own.join(testing::fixture_job(job, 1, optimizer_kind::sum), 0, token);
    std::cout << "joined job '" << job << "' as id " << own_id << "\n";
    std::vector<float> grad(1024, 1.0f);
    for (uint32_t tensor = 0; tensor < 3; ++tensor)
      for (uint32_t chunk = 0; chunk < 2; ++chunk)
        for (auto kind : {frame_kind::pull, frame_kind::push}) {
          protocol::frame_header h;
          h.kind = kind;
          h.job_id = target;
          h.rank = 0;
          h.tensor_id = tensor;
          h.chunk_index = chunk;
          if (kind == frame_kind::push)
            own.send_floats(h, grad);
          else
            own.send_frame(h);
          auto f = own.read_frame();
          bool refused = f && f->header.kind == frame_kind::error
                         && f->header.error_code == errc::unknown_job;
          std::cout << protocol::to_string(kind) << " job " << target << " chunk "
                    << tensor << "/" << chunk << ": "
                    << (refused ? "refused: " + f->error().message
                                : std::string("NOT REFUSED"))
                    << "\n";
          leaks += refused ? 0 : 1;
        }
    if (!steal.empty()) {
      testing::raw_client other{connect};
      try {
        other.join(testing::fixture_job(steal, 2, optimizer_kind::sum), 1, token);
        std::cout << "hello to job '" << steal
                  << "' with another job's token: NOT REFUSED\n";
        ++leaks;
      } catch (const rw::error& e) {
        // Only the refusal the token check gives counts: a lost connection or any other
        // error is not proof that the token was checked.
        bool unauthorized = e.code() == errc::unauthorized;
        std::cout << "hello to job '" << steal << "' with another job's token: "
                  << (unauthorized ? "refused: " : "NOT REFUSED as unauthorized: ")
                  << e.what() << " (" << to_string(e.code()) << ")\n";
        leaks += unauthorized ? 0 : 1;
      }
    }
  } catch (const std::exception& e) {
    std::cerr << "rw-test-probe: " << e.what() << "\n";
    return 2;
  }
  std::cout << (leaks == 0 ? "every attempt was refused\n"
                           : "SOME ATTEMPTS GOT THROUGH\n");
  return leaks == 0 ? 0 : 1;
}

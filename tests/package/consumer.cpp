// Compiled against the installed headers and library only: proves the public API is
// self-contained. Run with no node listening, it must fail cleanly with io_error.
#include <iostream>

#include <rackweave/worker.hpp>

int main() {
  rw::worker_options o;
  o.connect = "127.0.0.1:1";
  o.job.name = "consumer";
  o.job.tensors = {{"w", 16, false}};
  try {
    rw::worker w{o};
  } catch (const rw::error& e) {
    std::cout << "consumer: " << rw::to_string(e.code()) << ": " << e.what() << "\n";
    return e.code() == rw::errc::io_error ? 0 : 1;
  }
  return 1;
}

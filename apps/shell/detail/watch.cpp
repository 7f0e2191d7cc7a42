// rw.watch: a job's progress, refreshed until it ends, the time is up or Ctrl-C. On a
// terminal the view is redrawn in place; elsewhere (logs, pipes) one line per refresh.
#include <algorithm>
#include <chrono>
#include <ctime>
#include <optional>

#include <fmt/format.h>
#include <unistd.h>

#include "apps/shell/detail/commands.hpp"
#include "apps/shell/detail/job_tables.hpp"
#include "apps/shell/detail/lua_guard.hpp"
#include "apps/shell/format.hpp"
#include "apps/shell/interrupt.hpp"

namespace rw::shell::detail {

namespace {

constexpr const char* watch_fn = "rw.watch";

struct rates {
  bool known = false; // false on the first refresh
  double in = 0;      // bytes per second between the last two refreshes
  double out = 0;
};

uint64_t growth(uint64_t now, uint64_t before) {
  return now >= before ? now - before : 0; // counts restart when a rank is replaced
}

std::string human_wait(uint64_t us) {
  if (us < 1000)
    return fmt::format("{} us", us);
  if (us < 1000 * 1000)
    return fmt::format("{:.1f} ms", us / 1e3);
  return fmt::format("{:.1f} s", us / 1e6);
}

std::string clock_range(const job_totals& t) {
  return t.clock_min == t.clock_max ? fmt::format("{}", t.clock_min)
                                    : fmt::format("{}..{}", t.clock_min, t.clock_max);
}

std::string rate_text(const rates& r) {
  if (!r.known)
    return "rate in -, out -";
  return fmt::format("rate in {}, out {}", human_rate(r.in), human_rate(r.out));
}

std::string now_hms() {
  std::time_t now = std::time(nullptr);
  std::tm local{};
  localtime_r(&now, &local);
  char buf[16];
  std::strftime(buf, sizeof buf, "%H:%M:%S", &local);
  return buf;
}

std::string render_line(const actors::job_report& job, const job_totals& t,
                        const rates& r) {
  auto late = lateness_text(job);
  return fmt::format(
    "{} job '{}' {} clock {} pushes {} pulls {} in {} out {} wait {} {}{}\n", now_hms(),
    job.name, job.state, clock_range(t), t.pushes, t.pulls, human_bytes(t.bytes_in),
    human_bytes(t.bytes_out), human_wait(t.wait_us), rate_text(r),
    late.empty() ? std::string{} : "; " + late);
}

std::string render_screen(const actors::job_report& job, const job_totals& t,
                          const rates& r, double interval) {
  auto& s = job.spec;
  std::string out = "\033[H\033[2J"; // home, clear
  out += fmt::format("job '{}' (id {})  {}{}  on {}\n", job.name, job.id, job.state,
                     job.reason.empty() ? "" : " (" + job.reason + ")",
                     job.node.empty() ? "-" : job.node);
  out += fmt::format(
    "{} workers  {}  {} lr {}  {} chunks  compression {}{}   {}  every {} "
    "s, Ctrl-C stops\n\n",
    s.num_workers, to_string(s.consistency), to_string(s.optimizer.kind),
    s.optimizer.learning_rate, human_bytes(s.chunk_bytes), to_string(s.compression),
    s.compression.updates ? " (and updates)" : "", now_hms(), interval);
  out += fmt::format("{:>5} {:<7} {:>9} {:>10} {:>10} {:>11} {:>11} {:>10}  {}\n", "rank",
                     "state", "clock", "pushes", "pulls", "in", "out", "wait", "peer");
  for (auto& rk : job.ranks)
    out += fmt::format("{:>5} {:<7} {:>9} {:>10} {:>10} {:>11} {:>11} {:>10}  {}\n",
                       rk.rank, rk.state, rk.clock, rk.pushes, rk.pulls,
                       human_bytes(rk.bytes_in), human_bytes(rk.bytes_out),
                       human_wait(rk.wait_us), rk.peer);
  out += fmt::format("{:>5} {:<7} {:>9} {:>10} {:>10} {:>11} {:>11} {:>10}\n", "total",
                     "", clock_range(t), t.pushes, t.pulls, human_bytes(t.bytes_in),
                     human_bytes(t.bytes_out), human_wait(t.wait_us));
  out += fmt::format("\n{}\n", rate_text(r));
  if (auto late = lateness_text(job); !late.empty())
    out += late + "\n";
  return out;
}

} // namespace

int rw_watch(lua_State* L) {
  return protect(L, [&] {
    using clock = std::chrono::steady_clock;
    auto& ctx = context(L);
    auto name = arg_string(L, 1, watch_fn, "a job name");
    check_options(L, 2, watch_fn, {"interval", "seconds"});
    double interval = option_number(L, 2, watch_fn, "interval", 1, true);
    double seconds = option_number(L, 2, watch_fn, "seconds", 1e9, false);
    std::optional<interrupt_scope> scope;
    if (ctx.opts.interactive)
      scope.emplace();
    FILE* out = ctx.opts.out;
    bool tty = isatty(fileno(out));
    auto start = clock::now();
    std::optional<std::pair<clock::time_point, job_totals>> last;
    for (;;) {
      auto job = ask(watch_fn, [&] { return ctx.api->job_status(name); });
      auto now = clock::now();
      auto totals = totals_of(job);
      rates r;
      if (last) {
        double dt = std::chrono::duration<double>(now - last->first).count();
        r.known = dt > 0;
        if (r.known) {
          r.in = static_cast<double>(growth(totals.bytes_in, last->second.bytes_in)) / dt;
          r.out = static_cast<double>(growth(totals.bytes_out, last->second.bytes_out))
                  / dt;
        }
      }
      last.emplace(now, totals);
      auto text = tty ? render_screen(job, totals, r, interval)
                      : render_line(job, totals, r);
      std::fputs(text.c_str(), out);
      std::fflush(out);
      double elapsed = std::chrono::duration<double>(clock::now() - start).count();
      bool done = actors::is_ended(job.state) || elapsed >= seconds;
      if (!done && !pause_for(std::min(interval, seconds - elapsed))) {
        take_interrupt(); // Ctrl-C is how a watch is stopped: not an error
        if (tty)
          std::fputs("\n", out); // after the terminal's ^C
        done = true;
      }
      if (done) {
        push_job(L, job);
        return 1;
      }
    }
  });
}

} // namespace rw::shell::detail

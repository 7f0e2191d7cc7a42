// rw-shell: scripts a RackWeave cluster in Lua. `rw-shell --help` explains the options,
// the `rw` module and the exit codes; the module itself is in apps/shell/lua_rw.hpp.

#include <csignal>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <caf/all.hpp>
#include <lua.hpp>
#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include "actors/cluster_messages.hpp"
#include "actors/node/control_tls.hpp"
#include "actors/node/idle_policy.hpp"
#include "apps/shell/open_cluster.hpp"
#include "apps/shell/lua_rw.hpp"
#include "apps/shell/repl.hpp"
#include "apps/tools/crash_report.hpp"
#include "apps/tools/exit_codes.hpp"
#include "rackweave/defaults.hpp"
#include "runtime/credentials.hpp"
#include "runtime/tenants.hpp"
#include "transports/tcp/address.hpp"

namespace {

const char* description =
  "rw-shell: script a RackWeave cluster in Lua 5.4.\n\n"
  "Without -f or -c, and with a terminal on stdin, an interactive prompt (line editing,\n"
  "history); otherwise the script runs and the shell exits. The global table `rw` is\n"
  "the cluster:\n"
  "  rw.nodes(), rw.jobs()                        the live nodes, every job\n"
  "  rw.job_create{name=, workers=, optimizer=, consistency=, lr=, chunk_bytes=, node=}\n"
  "  rw.job_status(name), rw.job_stop(name), rw.job_delete(name)\n"
  "  rw.wait(name, \"finished\" | clock | function(job) [, {timeout=, interval=}])\n"
  "  rw.watch(name [, {interval=, seconds=}])     live progress of a job\n"
  "  rw.sleep(s), rw.coordinator(), rw.show(value), rw.help()\n"
  "Failures are Lua errors (pcall catches them). Arguments after -- are the script's\n"
  "arg[1], arg[2], ... (and its ...).";

const char* footer =
  "Exit codes: 0 ok, 1 the script failed (or could not be read), 2 usage error,\n"
  "3 the cluster cannot be reached.";

// Splits argv at "--": what comes before is ours, what follows is the script's.
std::vector<std::string> script_args(int argc, char** argv, int& our_argc) {
  our_argc = argc;
  for (int i = 1; i < argc; ++i)
    if (std::strcmp(argv[i], "--") == 0) {
      our_argc = i;
      return {argv + i + 1, argv + argc};
    }
  return {};
}

} // namespace

int main(int argc, char** argv) {
  rw::tools::install_crash_report("rw-shell"); // a fault leaves a backtrace on stderr
  int our_argc = argc;
  auto args = script_args(argc, argv, our_argc);
  std::string connect = rw::defaults::listen;
  std::string file;
  std::string command;
  int64_t timeout_ms = rw::defaults::shell_timeout_ms;
  std::string history = rw::shell::default_history_file();
  CLI::App app{description, "rw-shell"};
  app.footer(footer);
  app.set_version_flag("--version", std::string("rw-shell ") + RW_VERSION);
  app.add_option("--connect", connect, "any node's --listen address (HOST:PORT)")
    ->capture_default_str()
    ->check([](const std::string& text) -> std::string {
      try {
        if (rw::transports::tcp::parse_address(text).port == 0)
          return "--connect needs a port (HOST:PORT, not port 0): " + text;
        return "";
      } catch (const std::exception& e) {
        return e.what();
      }
    });
  auto* file_opt = app.add_option("-f,--file", file,
                                  "run this Lua file and exit (- : stdin)");
  auto* command_opt = app
                        .add_option("-c,--command", command, "run this Lua code and exit")
                        ->excludes(file_opt);
  app
    .add_option("--timeout", timeout_ms,
                "how long one request may take, in ms (a checkpoint waits 300 s more; "
                "rw.node_drain and rw.node_join 45 s more per job not ended)")
    ->capture_default_str()
    ->check(CLI::Range(int64_t{1}, int64_t{3'600'000}));
  app.add_option("--history", history, "the interactive history file")
    ->capture_default_str();
  std::string secret_file;
  app.add_option("--cluster-secret-file", secret_file,
                 "the cluster secret, when the coordinator wants one (the same file as "
                 "the nodes' --cluster-secret-file): the shell then speaks TLS with a "
                 "certificate derived from it");
  std::string tenant;
  std::string tenant_secret_file;
  auto* tenant_opt = app.add_option(
    "--tenant", tenant,
    "act as this tenant (the coordinator's --tenants-file): see and control "
    "only its jobs, named TENANT:NAME (TENANT: may be left out), within its "
    "quotas; needs --tenant-secret-file. The shell then speaks to the coordinator's "
    "tenant door (the node at --connect names it), where both sides prove the "
    "tenant's secret and every frame is sealed");
  auto* tenant_secret_opt =
    app
      .add_option("--tenant-secret-file", tenant_secret_file,
                  "the tenant's secret (first line, 16+ characters, chmod 600)")
      ->excludes("--cluster-secret-file");
  tenant_opt->needs(tenant_secret_opt);
  tenant_secret_opt->needs(tenant_opt);
  rw::actors::tls_files tls;
  app.add_option("--tls-cert", tls.cert,
                 "PEM certificate for a cluster whose control plane is TLS (the nodes' "
                 "--tls-*): with --tls-key and --tls-ca the shell connects over TLS and "
                 "checks that the coordinator's certificate comes from that CA");
  app.add_option("--tls-key", tls.key, "PEM private key of --tls-cert (chmod 600)");
  app.add_option("--tls-ca", tls.ca, "PEM certificate of the cluster's CA");
  if (auto code = rw::tools::parse_command_line(app, our_argc, argv))
    return *code;
  spdlog::set_default_logger(spdlog::stderr_color_mt("rw-shell"));
  spdlog::set_level(spdlog::level::warn);

  if (auto why = rw::runtime::tenant_name_error(tenant);
      !tenant.empty() && !why.empty()) {
    std::fprintf(stderr, "rw-shell: --tenant: %s\n", why.c_str());
    return 2;
  }
  std::string secret;
  if (!secret_file.empty() || !tenant_secret_file.empty()) {
    try {
      secret = tenant.empty() ? rw::runtime::read_secret_file(secret_file)
                              : rw::runtime::read_secret_file(
                                tenant_secret_file, "tenant '" + tenant + "' secret");
    } catch (const std::exception& e) {
      std::fprintf(stderr, "rw-shell: %s\n", e.what());
      return 2;
    }
  }
  caf::actor_system_config cfg;
  rw::actors::register_cluster_types(cfg);
  try {
    rw::actors::control_identity control;
    control.files = tls;
    if (tenant.empty()) // a tenant speaks to the tenant door, not over the middleman
      control.cluster_secret = secret;
    rw::actors::configure_control_tls(cfg, control);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "rw-shell: %s\n", e.what());
    return 2;
  }
  cfg.set("logger.verbosity", caf::atom("quiet"));
  rw::actors::configure_idle_policy(cfg);
  // CAF's threads must not take SIGINT: the prompt and rw.wait wait for it on this one.
  sigset_t sigint;
  sigemptyset(&sigint);
  sigaddset(&sigint, SIGINT);
  pthread_sigmask(SIG_BLOCK, &sigint, nullptr);
  caf::actor_system sys{cfg};
  std::unique_ptr<rw::shell::cluster_api> client;
  try {
    client = rw::shell::open_cluster(sys, connect, std::chrono::milliseconds(timeout_ms),
                                     secret, tenant);
  } catch (const rw::shell::shell_error& e) {
    // Not reached (nobody there, no answer, no TLS handshake): 3. Reached and refused (a
    // wrong secret, an unknown tenant): the operation failed, 1.
    if (e.code() == rw::errc::unavailable || e.code() == rw::errc::timeout) {
      std::fprintf(stderr, "rw-shell: cannot reach the cluster at %s: %s\n",
                   connect.c_str(), e.what());
      return rw::tools::exit_unreachable;
    }
    std::fprintf(stderr, "rw-shell: the cluster at %s refused the shell: %s\n",
                 connect.c_str(), e.what());
    return rw::tools::exit_failed;
  }
  pthread_sigmask(SIG_UNBLOCK, &sigint, nullptr);

  bool script = file_opt->count() > 0 || command_opt->count() > 0;
  bool interactive = !script && isatty(STDIN_FILENO);
  std::unique_ptr<lua_State, void (*)(lua_State*)> lua{luaL_newstate(), lua_close};
  if (!lua) {
    std::fprintf(stderr, "rw-shell: cannot create a Lua state (out of memory)\n");
    return 1;
  }
  luaL_openlibs(lua.get());
  rw::shell::install_rw(lua.get(), *client, {interactive, stdout});
  if (interactive) {
    rw::shell::set_script_args(lua.get(), argv[0], args);
    auto banner = "rw-shell " + std::string(RW_VERSION) + ", connected to " + connect
                  + ". rw.help() lists the commands; Ctrl-D exits.";
    return rw::shell::run_interactive(lua.get(), {history, banner});
  }
  rw::shell::script_source source; // stdin unless -f or -c
  if (command_opt->count() > 0)
    source = {rw::shell::script_source::code, command};
  else if (file_opt->count() > 0)
    source = {rw::shell::script_source::file, file};
  auto script_name = source.kind == rw::shell::script_source::code   ? std::string("-c")
                     : source.kind == rw::shell::script_source::file ? file
                                                                     : std::string("-");
  rw::shell::set_script_args(lua.get(), script_name, args);
  return rw::shell::run_script(lua.get(), source, args);
}

// The shell's `rw` Lua module over a fake cluster: job_create tables become the specs
// asked for (and bad ones are refused with the field named), reports come back as
// tables, the cluster's errors become Lua errors, rw.wait follows a job whose state
// advances, and the pretty printer shows values the way the prompt prints them.

#include <chrono>
#include <csignal>
#include <cstdio>
#include <functional>
#include <string>
#include <vector>

#include <catch2/catch.hpp>
#include <fmt/format.h>
#include <lua.hpp>

#include "apps/shell/cluster_api.hpp"
#include "apps/shell/format.hpp"
#include "apps/shell/interrupt.hpp"
#include "apps/shell/lua_rw.hpp"
#include "apps/shell/repl.hpp"

namespace rw_unit_shell_lua {

using Catch::Contains;
using rw::actors::job_report;
using rw::actors::rank_report;

namespace {

rank_report rank(uint32_t r, uint64_t clock, const char* state = "live") {
  return {r,
          state,
          "10.0.0.1:4000" + std::to_string(r),
          clock,
          clock * 4,
          clock * 2,
          clock * 1000,
          clock * 500,
          1500};
}

job_report job(const std::string& name, const std::string& state) {
  job_report j;
  j.id = 7;
  j.name = name;
  j.state = state;
  j.node = "rack-a";
  j.endpoints = {"10.0.0.2:7700", "10.0.0.3:7700"};
  j.spec.name = name;
  j.spec.num_workers = 2;
  j.spec.consistency = rw::parse_consistency("ssp:2");
  j.spec.optimizer.kind = rw::optimizer_kind::adam;
  j.spec.tensors = {{"w", 1000, true}};
  if (state != "created")
    j.started_unix_ms = 1000;
  return j;
}

// Answers from canned data; `status` decides job_status by how often it was asked.
struct fake_cluster : rw::shell::cluster_api {
  std::vector<std::string> calls;
  std::string fail; // non-empty: the next call throws shell_error with it
  rw::job_spec spec;
  rw::actors::job_placement placement;
  std::function<job_report(int)> status = [](int) { return job("j", "running"); };
  int status_calls = 0;
  int timeouts = 0; // job_status calls left that the coordinator does not answer in time

  void called(const std::string& what) {
    calls.push_back(what);
    if (!fail.empty())
      throw rw::shell::shell_error(std::exchange(fail, {}));
  }
  std::vector<rw::actors::node_info> nodes() override {
    called("nodes");
    return {{1,
             "rack-a",
             "rack-agg",
             "r1",
             {"10.0.0.2:7700", "10.0.0.3:7700"},
             4,
             1,
             20,
             10,
             40},
            {2, "rack-b", "rack-agg", "r2", {"10.0.1.2:7700"}, 8, 0, 310, 0, 0}};
  }
  std::vector<job_report> jobs() override {
    called("jobs");
    return {job("a", "running"), job("b", "finished")};
  }
  rw::actors::job_created job_create(const rw::job_spec& s,
                                     const rw::actors::job_placement& p) override {
    called("job_create");
    spec = s;
    placement = p;
    return {job(s.name, "created"), "tok-123"};
  }
  job_report job_status(const std::string& name) override {
    called("job_status " + name);
    if (timeouts > 0) {
      --timeouts;
      throw rw::shell::shell_error(
        "job_status: the coordinator at 10.0.0.9:7800 did not answer within 10000 ms",
        rw::errc::timeout);
    }
    return status(++status_calls);
  }
  job_report job_stop(const std::string& name) override {
    called("job_stop " + name);
    auto j = job(name, "stopped");
    j.reason = "stopped by the user";
    return j;
  }
  void job_delete(const std::string& name) override { called("job_delete " + name); }
  uint64_t job_set(const std::string& name, const rw::hyper_change& c) override {
    called(fmt::format("job_set {} {}", name, rw::describe(c)));
    return 7;
  }
  rw::actors::checkpoint_info checkpoint(const std::string& name, const std::string& dir,
                                         uint64_t clock) override {
    called(fmt::format("checkpoint {} {} {}", name, dir, clock));
    return {name, dir, clock == 0 ? 7 : clock, {"chunks-n0.rwck"}, 4096};
  }
  std::string inject(const std::string& name, const std::string& kill,
                     const std::string& node, uint32_t index) override {
    called(fmt::format("inject {} {} '{}' {}", name, kill, node, index));
    return "crashed shard " + std::to_string(index) + " of node n0";
  }
  std::string node_drain(const std::string& name) override {
    called("node_drain " + name);
    return "node " + name + " drained";
  }
  std::string node_join(const std::string& name) override {
    called("node_join " + name);
    return "node " + name + " joined";
  }
  std::string coordinator() const override { return "10.0.0.9:7800"; }
};

struct shell {
  fake_cluster api;
  FILE* out = std::tmpfile();
  lua_State* L = luaL_newstate();

  explicit shell(bool interactive = false) {
    luaL_openlibs(L);
    rw::shell::install_rw(L, api, {interactive, out});
  }
  ~shell() {
    lua_close(L);
    std::fclose(out);
  }
  // Runs `code`; "" when it ran, else the error message.
  std::string run(const std::string& code) {
    if (luaL_dostring(L, code.c_str()) == LUA_OK) {
      lua_settop(L, 0);
      return {};
    }
    std::string msg = lua_tostring(L, -1);
    lua_settop(L, 0);
    return msg;
  }
  // The value of `expr`, pretty-printed (or "error: ...").
  std::string eval(const std::string& expr) {
    if (luaL_dostring(L, ("return " + expr).c_str()) != LUA_OK) {
      std::string msg = "error: " + std::string(lua_tostring(L, -1));
      lua_settop(L, 0);
      return msg;
    }
    auto text = rw::shell::format_value(L, -1);
    lua_settop(L, 0);
    return text;
  }
  std::string output() {
    std::fflush(out);
    std::rewind(out);
    std::string text;
    char buf[4096];
    while (auto n = std::fread(buf, 1, sizeof buf, out))
      text.append(buf, n);
    return text;
  }
};

} // namespace

TEST_CASE("job_create turns its table into the spec asked for", "[shell]") {
  shell sh;
  CHECK(sh.eval("rw.job_create{name = 'j', workers = 4}.token") == "\"tok-123\"");
  auto& s = sh.api.spec;
  CHECK(s.name == "j");
  CHECK(s.num_workers == 4);
  CHECK(s.chunk_bytes == rw::defaults::chunk_bytes);
  CHECK(s.optimizer.kind == rw::optimizer_kind::sum);
  CHECK(s.optimizer.learning_rate == rw::optimizer_spec{}.learning_rate);
  CHECK(s.optimizer.beta2 == rw::optimizer_spec{}.beta2);
  CHECK(s.consistency.model == rw::consistency_spec::bsp);
  CHECK(s.tensors.empty());
  CHECK(sh.api.placement.node.empty());
  CHECK(sh.api.placement.nodes.empty());
  CHECK(sh.api.placement.racks.empty());
  CHECK(sh.api.placement.reduction == "auto");

  CHECK(sh.run("j = rw.job_create{name = 'k', workers = 8.0, consistency = 'ssp:2', "
               "optimizer = 'adam', lr = 0.001, beta1 = 0.8, weight_decay = 0.01, "
               "chunk_bytes = '64KiB', node = 'rack-b'}")
        == "");
  CHECK(s.num_workers == 8);
  CHECK(s.consistency.model == rw::consistency_spec::ssp);
  CHECK(s.consistency.staleness == 2);
  CHECK(s.optimizer.kind == rw::optimizer_kind::adam);
  CHECK(s.optimizer.learning_rate == 0.001f);
  CHECK(s.optimizer.beta1 == 0.8f);
  CHECK(s.optimizer.weight_decay == 0.01f);
  CHECK(s.chunk_bytes == 64 * 1024);
  CHECK(sh.api.placement.node == "rack-b");
  CHECK(sh.eval("j.name .. ' ' .. j.state .. ' ' .. j.token") == "\"k created tok-123\"");
  CHECK(sh.run("rw.job_create{name = 'm', workers = 1, chunk_bytes = 4096}") == "");
  CHECK(s.chunk_bytes == 4096);
  CHECK(sh.run("rw.job_create{name = 'n', workers = 4, racks = {'r1', 'r2'}, "
               "reduction = 'flat'}")
        == "");
  CHECK(sh.api.placement.racks == std::vector<std::string>{"r1", "r2"});
  CHECK(sh.api.placement.reduction == "flat");
  CHECK(sh.run("rw.job_create{name = 'o', workers = 4, nodes = {'rack-a', 'rack-b'}}")
        == "");
  CHECK(sh.api.placement.nodes == std::vector<std::string>{"rack-a", "rack-b"});
  CHECK(sh.eval("rw.nodes()[1].rack") == "\"r1\"");
}

TEST_CASE("rw.node_drain reaches the cluster, a bad name is a clear error", "[shell]") {
  shell sh;
  CHECK(sh.eval("rw.node_drain('n1')") == "\"node n1 drained\"");
  CHECK(sh.api.calls == std::vector<std::string>{"node_drain n1"});
  CHECK_THAT(sh.run("rw.node_drain(3)"), Catch::Contains("rw.node_drain"));
  CHECK_THAT(sh.run("rw.node_drain()"), Catch::Contains("a node name"));
}

TEST_CASE("rw.node_join reaches the cluster, a bad name is a clear error", "[shell]") {
  shell sh;
  CHECK(sh.eval("rw.node_join('n2')") == "\"node n2 joined\"");
  CHECK(sh.api.calls == std::vector<std::string>{"node_join n2"});
  CHECK_THAT(sh.run("rw.node_join({})"), Catch::Contains("rw.node_join"));
  CHECK_THAT(sh.run("rw.node_join()"), Catch::Contains("a node name"));
}

TEST_CASE("rw.inject reaches the cluster, bad arguments are clear errors", "[shell]") {
  shell sh;
  CHECK(sh.eval("rw.inject{job = 'j', kill = 'shard', node = 'n1', shard = 2}")
        == "\"crashed shard 2 of node n0\"");
  CHECK(sh.eval("rw.inject{job = 'j', kill = 'shard'}")
        == "\"crashed shard 0 of node n0\"");
  CHECK(sh.api.calls
        == std::vector<std::string>{"inject j shard 'n1' 2", "inject j shard '' 0"});
  CHECK_THAT(sh.run("rw.inject{kill = 'shard'}"),
             Catch::Contains("job = NAME is required"));
  CHECK_THAT(sh.run("rw.inject{job = 'j'}"),
             Catch::Contains("kill = 'shard' or kill = 'link' is required"));
  CHECK_THAT(sh.run("rw.inject{job = 'j', kill = 'shard', shard = 1.5}"),
             Catch::Contains("shard must be a whole number"));
  CHECK_THAT(sh.run("rw.inject{job = 'j', kill = 'shard', shards = 1}"),
             Catch::Contains("shards"));
  CHECK_THAT(sh.run("rw.inject('j')"), Catch::Contains("rw.inject expects"));
}

TEST_CASE("rw.inject kill = 'link' takes a rank, every rank by default", "[shell]") {
  shell sh;
  sh.eval("rw.inject{job = 'j', kill = 'link', node = 'n1', rank = 3}");
  sh.eval("rw.inject{job = 'j', kill = 'link'}");
  CHECK(
    sh.api.calls
    == std::vector<std::string>{"inject j link 'n1' 3", "inject j link '' 4294967295"});
  CHECK_THAT(sh.run("rw.inject{job = 'j', kill = 'link', shard = 1}"),
             Catch::Contains("shard = goes with kill = 'shard'"));
  CHECK_THAT(sh.run("rw.inject{job = 'j', kill = 'shard', rank = 1}"),
             Catch::Contains("rank = goes with kill = 'link'"));
  CHECK_THAT(sh.run("rw.inject{job = 'j', kill = 'link', rank = -2}"),
             Catch::Contains("option rank must be a whole number >= 0, got -2"));
}

TEST_CASE("rw.checkpoint and job_create's checkpoint fields reach the cluster",
          "[shell]") {
  shell sh;
  CHECK(sh.eval("rw.checkpoint('j', '/ck/a').clock") == "7");
  CHECK(sh.eval("rw.checkpoint('j', '/ck/b', {clock = 12}).files[1]")
        == "\"chunks-n0.rwck\"");
  CHECK(sh.api.calls
        == std::vector<std::string>{"checkpoint j /ck/a 0", "checkpoint j /ck/b 12"});
  CHECK_THAT(sh.run("rw.checkpoint('j', '/ck/c', {clock = -1})"),
             Catch::Contains("clock must be a positive whole number"));
  CHECK_THAT(sh.run("rw.checkpoint('j')"), Catch::Contains("rw.checkpoint"));
  CHECK(sh.run("rw.job_create{name = 'r', workers = 2, restore = '/ck/a', "
               "checkpoint_every = 100, checkpoint_dir = '/ck/r'}")
        == "");
  CHECK(sh.api.placement.restore == "/ck/a");
  CHECK(sh.api.placement.checkpoint_every == 100);
  CHECK(sh.api.placement.checkpoint_dir == "/ck/r");
  CHECK_THAT(sh.run("rw.job_create{name = 'r', workers = 2, checkpoint_every = 0}"),
             Catch::Contains("checkpoint_every must be a positive whole number"));
}

TEST_CASE("job_create refuses bad tables, naming the field", "[shell]") {
  shell sh;
  auto refused = [&](const std::string& table, const std::string& says) {
    INFO(table);
    CHECK_THAT(sh.run("rw.job_create" + table),
               Contains("rw.job_create") && Contains(says));
  };
  refused("{name = 'j', workers = 2, wokers = 3}",
          "unknown field 'wokers' (fields: name,");
  refused("{name = 'j', workers = 'four'}", "workers must be a whole number");
  refused("{name = 'j', workers = 2.5}", "got 2.5");
  refused("{name = 'j', workers = -1}", "workers must be a whole number");
  refused("{name = 'j', workers = 2, optimizer = 'adamw'}",
          "optimizer must be one of sum, sgd, momentum, nesterov, adam, lamb, lars, got "
          "'adamw'");
  refused("{name = 'j', workers = 2, consistency = 'ssp:x'}", "consistency: 'ssp:x'");
  refused("{name = 'j', workers = 2, consistency = 'eventual'}", "bsp, ssp:S or async");
  refused("{name = 'j', workers = 2, lr = '0.1'}", "lr must be a number, got \"0.1\"");
  refused("{name = 'j', workers = 2, chunk_bytes = 'lots'}", "size such as \"32KiB\"");
  refused("{name = 7, workers = 2}", "name must be the job's name (a string), got 7");
  refused("{workers = 2}", "name is required");
  refused("{name = 'j'}", "workers is required");
  refused("{'j', 2}", "fields are named");
  refused("('j')", "expects a table");
  refused("{name = 'j', workers = 2, racks = 'a'}", "racks must be the racks");
  refused("{name = 'j', workers = 2, racks = {}}", "racks must name at least one");
  refused("{name = 'j', workers = 2, nodes = {'a', 3}}",
          "nodes[2] must be a non-empty string");
  CHECK(sh.api.calls.empty()); // nothing reached the cluster
}

TEST_CASE("the cluster's reports come back as tables", "[shell]") {
  shell sh;
  CHECK(sh.eval("#rw.nodes()") == "2");
  CHECK(sh.eval("rw.nodes()[1].endpoints[2]") == "\"10.0.0.3:7700\"");
  CHECK(sh.eval("rw.nodes()[2].last_seen_ms") == "310");
  CHECK(sh.eval("#rw.jobs() .. rw.jobs()[2].state") == "\"2finished\"");
  sh.api.status = [](int) {
    auto j = job("j", "running");
    j.spec.chunk_bytes = 1000; // 250 elements a chunk: 4 chunks a step
    j.ranks = {rank(0, 5), rank(1, 3)};
    // Rank 1 comes 30.5 ms late a step; a step has waited 1200 ms for its 7 chunks.
    j.lateness = {{0, 200, 300, 900, 12, 0, 0}, {1, 31000, 30500, 42000, 12, 1200, 7}};
    return j;
  };
  REQUIRE(sh.run("j = rw.job_status('j')") == "");
  CHECK(sh.eval("{j.chunks_per_step, j.ranks[2].steps_pushed, j.ranks[2].steps_pulled}")
        == "{4, 3, 1}");
  CHECK(sh.eval("{j.clock_min, j.clock_max, j.pushes, j.bytes_in, j.wait_ms}")
        == "{3, 5, 32, 8000, 3.0}");
  CHECK(sh.eval("j.ranks[2]")
        == "{\n  bytes_in = 3000,\n  bytes_out = 1500,\n  clock = 3,\n"
           "  late_last_ms = 31.0,\n  late_max_ms = 42.0,\n  late_ms = 30.5,\n"
           "  late_steps = 12,\n  missing_chunks = 7,\n"
           "  peer = \"10.0.0.1:40001\",\n  pulls = 6,\n  pushes = 12,\n  rank = 1,\n"
           "  state = \"live\",\n  steps_pulled = 1,\n  steps_pushed = 3,\n  wait_ms = "
           "1.5,\n  waited_ms = 1200\n}");
  // Rank 0 is 0.3 ms late a step: under the 1 ms floor, not among the slowest.
  CHECK(sh.eval("{j.ranks[1].late_ms, j.slowest}") == "{0.3, {1}}");
  // rw.wait's timeout says who holds the job up.
  CHECK_THAT(sh.run("rw.wait('j', 100, {timeout = 0.05, interval = 0.01})"),
             Contains("slowest ranks: 1 (30.5 ms late a step); a step has waited 1200 ms "
                      "for rank 1 (7 chunks missing)"));
  CHECK(sh.eval("j.optimizer.kind .. ' ' .. j.consistency") == "\"adam ssp:2\"");
  CHECK(sh.eval("j.optimizer.lr == 0.01 and j.optimizer.beta2 == 0.999") == "true");
  CHECK(sh.eval("j.tensors") == "{{elements = 1000, has_init = true, name = \"w\"}}");
  CHECK(sh.eval("j.endpoints") == "{\"10.0.0.2:7700\", \"10.0.0.3:7700\"}");
  CHECK(sh.eval("rw.job_stop('j').reason") == "\"stopped by the user\"");
  CHECK(sh.eval("rw.job_delete('j')") == "true");
  CHECK(sh.eval("rw.coordinator()") == "\"10.0.0.9:7800\"");
  CHECK(sh.api.calls.back() == "job_delete j");
  CHECK_THAT(sh.run("rw.job_status(3)"),
             Contains("rw.job_status expects a job name (a string), got 3"));
}

TEST_CASE("the cluster's errors become Lua errors with their message", "[shell]") {
  shell sh;
  sh.api.fail = "unknown job 'zz'";
  CHECK(sh.eval("select(2, pcall(rw.job_status, 'zz'))") == "\"unknown job 'zz'\"");
  sh.api.fail = "coordinator unreachable";
  CHECK(sh.run("rw.nodes()") == "[string \"rw.nodes()\"]:1: coordinator unreachable");
  sh.api.fail = "workers must be 1..1024, got 0";
  CHECK_THAT(sh.run("rw.job_create{name = 'j', workers = 0}"),
             Contains(":1: workers must be 1..1024, got 0"));
  sh.api.fail = "no answer within 10000 ms";
  CHECK_THAT(sh.run("rw.wait('j', 'ended')"), Contains("rw.wait: no answer within"));
  CHECK(sh.run("rw.jobs()") == ""); // one failure does not stick
}

TEST_CASE("an unknown command lists the commands", "[shell]") {
  shell sh;
  CHECK_THAT(sh.run("rw.foo(1)"),
             Contains("rw.foo is not a command; commands: nodes, jobs, job_create,"));
  CHECK(sh.eval("require('rw') == rw") == "true");
  CHECK(sh.run("rw.help()") == "");
  CHECK_THAT(sh.output(), Contains("rw.wait(name, cond"));
}

TEST_CASE("rw.wait follows a job until the condition holds", "[shell]") {
  shell sh;
  sh.api.status = [](int n) { // created, running with clocks n-2, finished at call 6
    auto j = job("j", n < 3 ? "created" : n < 6 ? "running" : "finished");
    if (n >= 3)
      j.ranks = {rank(0, n - 2), rank(1, n - 2, n < 6 ? "live" : "left")};
    return j;
  };
  CHECK(sh.eval("rw.wait('j', 'running', {interval = 0.001}).state") == "\"running\"");
  CHECK(sh.api.status_calls == 3);
  sh.api.status_calls = 0;
  CHECK(sh.eval("rw.wait('j', 2, {interval = 0.001}).clock_min") == "2");
  CHECK(sh.api.status_calls == 4);
  sh.api.status_calls = 0;
  CHECK(sh.eval("rw.wait('j', function(j) return j.pushes >= 24 end, {interval = 0.001})"
                ".pushes")
        == "24");
  sh.api.status_calls = 0;
  CHECK(sh.eval("rw.wait('j', 'finished', {interval = 0.001}).state") == "\"finished\"");
  CHECK(sh.api.status_calls == 6);
  sh.api.status_calls = 10; // ended already: "running" was reached, "ended" holds
  CHECK(sh.eval("rw.wait('j', 'running').state") == "\"finished\"");
  CHECK(sh.eval("rw.wait('j', 'ended').state") == "\"finished\"");
  CHECK_THAT(sh.run("rw.wait('j', function() error('boom') end)"),
             Contains("rw.wait: the condition function failed:") && Contains("boom"));
}

TEST_CASE("rw.wait fails at once on an ended job and is bounded in time", "[shell]") {
  shell sh;
  sh.api.status = [](int) {
    auto j = job("j", "failed");
    j.reason = "worker 1 left";
    return j;
  };
  CHECK_THAT(sh.run("rw.wait('j', 'finished')"),
             Contains("rw.wait: job 'j' ended (state: failed, reason: worker 1 left) and "
                      "will never reach finished"));
  CHECK_THAT(sh.run("rw.wait('j', 100)"), Contains("never reach clock 100"));
  CHECK(sh.api.status_calls == 2); // one look each
  sh.api.status = [](int) { return job("j", "running"); };
  CHECK_THAT(sh.run("rw.wait('j', 'finished', {timeout = 0.05, interval = 0.01})"),
             Contains("rw.wait: job 'j' did not reach finished within 0.05 s (state: "
                      "running)"));
  CHECK_THAT(sh.run("rw.wait('j', 'done')"), Contains("created, running, finished"));
  CHECK_THAT(sh.run("rw.wait('j', 'ended', {timout = 1})"),
             Contains("unknown option \"timout\" (options: interval, timeout)"));
  CHECK_THAT(sh.run("rw.wait('j', 'ended', {interval = 0})"),
             Contains("option interval must be a number of seconds > 0, got 0"));
  sh.api.fail = "unknown job 'j'";
  CHECK_THAT(sh.run("rw.wait('j', 'ended')"), Contains("rw.wait: unknown job 'j'"));
}

TEST_CASE("rw.wait asks again when a status call goes unanswered, within its timeout",
          "[shell]") {
  // A coordinator busy for a while (a slow disk held its answers 10 s in CI) is not
  // the end of a wait: only its own timeout is.
  shell sh;
  sh.api.status = [](int n) { return job("j", n < 2 ? "running" : "finished"); };
  sh.api.timeouts = 2;
  CHECK(sh.eval("rw.wait('j', 'finished', {interval = 0.001}).state") == "\"finished\"");
  CHECK(sh.api.status_calls == 2); // two answered, after two unanswered
  sh.api.timeouts = 1000;
  CHECK_THAT(sh.run("rw.wait('j', 'ended', {timeout = 0.05, interval = 0.01})"),
             Contains("rw.wait: job 'j': no status within 0.05 s: job_status: the "
                      "coordinator at 10.0.0.9:7800 did not answer within 10000 ms")
               && Contains("unanswered"));
  sh.api.timeouts = 0;
  sh.api.fail = "the connection to the coordinator at 10.0.0.9:7800 failed: refused";
  CHECK_THAT(sh.run("rw.wait('j', 'ended')"), // not a slow answer: at once
             Contains("rw.wait: the connection to the coordinator"));
}

TEST_CASE("rw.watch prints a line per refresh off a terminal", "[shell]") {
  shell sh;
  sh.api.status = [](int n) {
    auto j = job("j", n < 3 ? "running" : "finished");
    j.ranks = {rank(0, n), rank(1, n)};
    return j;
  };
  CHECK(sh.eval("rw.watch('j', {interval = 0.001}).state") == "\"finished\"");
  auto out = sh.output();
  CHECK(std::count(out.begin(), out.end(), '\n') == 3);
  CHECK_THAT(out, Contains("job 'j' running clock 1 pushes 8 pulls 4 in 2.0 KiB"));
  CHECK_THAT(out, Contains("job 'j' finished clock 3"));
  CHECK(out.find("\033[") == std::string::npos);
  sh.api.status = [](int) { return job("j", "running"); };
  CHECK(sh.eval("rw.watch('j', {interval = 0.001, seconds = 0.01}).state")
        == "\"running\"");
  CHECK(sh.run("rw.sleep(0.001)") == "");
  CHECK_THAT(sh.run("rw.sleep(-1)"),
             Contains("rw.sleep expects a number of seconds >= 0"));
}

TEST_CASE("rw.time_ms is the system clock in milliseconds, and times a pause",
          "[shell]") {
  shell sh;
  auto ms = [] {
    return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
  };
  auto before = ms();
  auto told = std::stoll(sh.eval("rw.time_ms()"));
  auto after = ms();
  CHECK(told >= before);
  CHECK(told <= after);
  CHECK(sh.eval("math.type(rw.time_ms())") == "\"integer\"");
  // A 50 ms pause reads at least 50 ms (the clock moves with it).
  CHECK(sh.eval("(function() local t = rw.time_ms(); rw.sleep(0.05); "
                "return rw.time_ms() - t >= 50 end)()")
        == "true");
}

TEST_CASE("Ctrl-C stops rw.wait, rw.watch and Lua loops in the interactive shell",
          "[shell]") {
  shell sh{true};
  sh.api.status = [](int n) { // Ctrl-C while the second answer is shown
    if (n == 2)
      std::raise(SIGINT);
    return job("j", "running");
  };
  CHECK_THAT(sh.run("rw.wait('j', 'finished', {interval = 0.01})"),
             Contains("rw.wait: interrupted before job 'j' reached finished"));
  CHECK(rw::shell::take_interrupt());
  sh.api.status_calls = 0;
  CHECK(sh.eval("rw.watch('j', {interval = 0.01}).state") == "\"running\""); // no error
  CHECK(sh.api.status_calls == 2);
  CHECK_FALSE(rw::shell::interrupt_pending()); // the watch took it
  {
    rw::shell::interrupt_scope scope{sh.L};
    std::raise(SIGINT);
    CHECK_FALSE(rw::shell::pause_for(5));
    CHECK_THAT(sh.run("while true do end"), Contains("interrupted"));
  }
  CHECK(rw::shell::take_interrupt());
  rw::shell::clear_interrupt_hook(sh.L);
  CHECK(sh.run("x = 1") == "");
}

TEST_CASE("the pretty printer shows tables as Lua constructors", "[shell]") {
  shell sh;
  CHECK(sh.eval("{3, 2, 1, b = {x = 1}, a = 's', [10] = true, ['a b'] = 1.0}")
        == "{3, 2, 1, [10] = true, a = \"s\", [\"a b\"] = 1.0, b = {x = 1}}");
  CHECK(sh.eval("{}") == "{}");
  CHECK(sh.eval("'tab\\there \"q\"\\n'") == "\"tab\\there \\\"q\\\"\\n\"");
  CHECK(sh.eval("0.1 + 0.2 == 0.3") == "false");
  CHECK(sh.eval("1e300 * 1e10") == "inf");
  CHECK(sh.eval("{{1, {2}}, ['end'] = 1}") == "{{1, {2}}, [\"end\"] = 1}");
  CHECK(sh.eval("{long = string.rep('x', 60), n = {1, {y = string.rep('z', 70)}}}")
        == "{\n  long = \"" + std::string(60, 'x')
             + "\",\n  n = {\n    1,\n    {\n"
               "      y = \""
             + std::string(70, 'z') + "\"\n    }\n  }\n}");
  CHECK(sh.run("t = {name = 'x'}; t.self = t; t.list = {t}") == "");
  CHECK(sh.eval("t") == "{list = {<cycle>}, name = \"x\", self = <cycle>}");
  CHECK(sh.eval("setmetatable({}, {__index = function() error('no') end, "
                "__tostring = function() error('no') end})")
        == "{}");
  CHECK_THAT(sh.eval("print"), Contains("<function: 0x"));
  CHECK(sh.run("rw.show({a = {1, 2}})") == "");
  CHECK(sh.output() == "{a = {1, 2}}\n");
  CHECK(rw::shell::human_bytes(512) == "512 B");
  CHECK(rw::shell::human_bytes(3 * 1024 * 1024 / 2) == "1.5 MiB");
  CHECK(rw::shell::human_rate(2048) == "2.0 KiB/s");
}

TEST_CASE("scripts get their arguments and report failure", "[shell]") {
  shell sh;
  rw::shell::set_script_args(sh.L, "s.lua", {"a", "b"});
  using src = rw::shell::script_source;
  CHECK(rw::shell::run_script(
          sh.L, {src::code, "n = select('#', ...) + #arg; x = arg[2]"}, {"a", "b"})
        == 0);
  CHECK(sh.eval("n .. x .. arg[0]") == "\"4bs.lua\"");
  CHECK(rw::shell::run_script(sh.L, {src::code, "rw.wait('j', 'nope')"}, {}) == 1);
  CHECK(rw::shell::run_script(sh.L, {src::code, "this is not lua"}, {}) == 1);
  CHECK(rw::shell::run_script(sh.L, {src::file, "/nonexistent/x.lua"}, {}) == 1);
}

TEST_CASE(
  "rw.job_set reaches the cluster with the fields given, bad ones are clear errors",
  "[shell]") {
  shell sh;
  CHECK(sh.eval("rw.job_set{name = 'j', at_clock = 30, lr = 0.5, momentum = 0.8}")
        == "7");
  CHECK(sh.api.calls
        == std::vector<std::string>{"job_set j lr=0.5 momentum=0.8 at clock 30"});
  CHECK_THAT(sh.run("rw.job_set{name = 'j', lr = 0.1}"),
             Catch::Contains("at_clock = C is required"));
  CHECK_THAT(sh.run("rw.job_set{name = 'j', at_clock = 1}"),
             Catch::Contains("no hyper-parameter to change"));
  CHECK_THAT(sh.run("rw.job_set{name = 'j', at_clock = 1.5, lr = 1}"),
             Catch::Contains("at_clock must be a whole number"));
  CHECK_THAT(sh.run("rw.job_set{name = 'j', at_clock = 1, momentum = 1}"),
             Catch::Contains("momentum must be below 1"));
  CHECK_THAT(sh.run("rw.job_set{name = 'j', at_clock = 1, lr = 'x'}"),
             Catch::Contains("lr must be a number"));
  CHECK_THAT(sh.run("rw.job_set{name = 'j', at_clock = 1, eta = 1}"),
             Catch::Contains("eta"));
  CHECK_THAT(sh.run("rw.job_set{at_clock = 1, lr = 1}"), Catch::Contains("name = NAME"));
  CHECK(sh.api.calls.size() == 1);
}

TEST_CASE("rw.job_create declares tensors in order, by position or by name", "[shell]") {
  shell sh;
  CHECK(sh.run("rw.job_create{name = 'j', workers = 2, tensors = {{'w', 1024}, "
               "{name = 'b', elements = 16, has_init = true}}}")
        == "");
  REQUIRE(sh.api.spec.tensors.size() == 2);
  CHECK(sh.api.spec.tensors[0].name == "w");
  CHECK(sh.api.spec.tensors[0].elements == 1024);
  CHECK(!sh.api.spec.tensors[0].has_init);
  CHECK(sh.api.spec.tensors[1].name == "b");
  CHECK(sh.api.spec.tensors[1].elements == 16);
  CHECK(sh.api.spec.tensors[1].has_init);
  CHECK_THAT(sh.run("rw.job_create{name = 'j', workers = 2, tensors = {w = 3}}"),
             Catch::Contains("tensors must be a list"));
  CHECK_THAT(sh.run("rw.job_create{name = 'j', workers = 2, tensors = {{'w', 1.5}}}"),
             Catch::Contains("elements must be a positive whole number"));
  CHECK_THAT(sh.run("rw.job_create{name = 'j', workers = 2, tensors = {{3, 4}}}"),
             Catch::Contains("the name must be a string"));
  CHECK_THAT(
    sh.run("rw.job_create{name = 'j', workers = 2, tensors = {{'w', 4, 'yes'}}}"),
    Catch::Contains("has_init must be true or false"));
}

} // namespace rw_unit_shell_lua

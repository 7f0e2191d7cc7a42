// rw-train-demo: data-parallel training of a small MLP through a rack-agg node.
//
//   rw-train-demo --connect 127.0.0.1:7700 --workers 4 --rank R --job demo
//
// Every rank generates its own shard of two interleaved spirals (a problem no linear
// model solves), computes the mean binary cross-entropy gradient of a 2-32-1 tanh MLP
// over a minibatch and push_pulls it; the node averages the workers' gradients and runs
// Adam, so every rank gets the same new parameters back. Rank 0 reports progress and
// exits 1 if training did not lower the loss on its shard.

#include <unistd.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <fstream>
#include <cmath>
#include <future>
#include <iostream>
#include <iterator>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include "rackweave/worker.hpp"

namespace {

using clock_type = std::chrono::steady_clock;

constexpr size_t hidden = 32;
constexpr size_t shard_points = 1000;
constexpr float pi = 3.14159265f;

struct args {
  std::string connect = rw::defaults::listen;
  uint32_t rank = 0;
  uint32_t workers = 1;
  uint32_t steps = 300;
  std::string job = "train-demo";
  std::string token;
  uint32_t batch = 64;
  float lr = 0.03f;
};

// The MLP's parameters, or a gradient of the same shape. Each member is one tensor of
// the job, so it travels as one push_pull.
struct mlp {
  std::vector<float> w1 = std::vector<float>(hidden * 2); // row j: weights of unit j
  std::vector<float> b1 = std::vector<float>(hidden);
  std::vector<float> w2 = std::vector<float>(hidden);
  std::vector<float> b2 = std::vector<float>(1);

  std::array<std::pair<const char*, std::vector<float>*>, 4> tensors() {
    return {{{"W1", &w1}, {"b1", &b1}, {"W2", &w2}, {"b2", &b2}}};
  }
  size_t elements() const { return w1.size() + b1.size() + w2.size() + b2.size(); }
};

struct shard {
  std::vector<std::array<float, 2>> x;
  std::vector<float> y; // 0 or 1
};

// Two spirals of 1.25 turns, one per class, with a little noise. Seeded by rank so the
// shards differ but every run is reproducible.
shard make_shard(uint32_t rank) {
  std::mt19937 rng{1000 + rank};
  std::uniform_real_distribution<float> unit{0.0f, 1.0f};
  std::normal_distribution<float> noise{0.0f, 0.04f};
  shard s;
  for (size_t i = 0; i < shard_points; ++i) {
    float label = static_cast<float>(i % 2);
    float t = unit(rng);
    float angle = 2.5f * pi * t + label * pi;
    // Radius up to 2 keeps the inputs where tanh units are not saturated.
    float r = 2.0f * t;
    s.x.push_back({r * std::cos(angle) + noise(rng), r * std::sin(angle) + noise(rng)});
    s.y.push_back(label);
  }
  return s;
}

// Xavier-uniform weights and zero biases from a fixed seed: rank 0 sends these as
// version 0, so the run does not depend on which rank starts first.
mlp initial_params() {
  std::mt19937 rng{42};
  auto xavier = [&](std::vector<float>& w, size_t fan_in, size_t fan_out) {
    float limit = std::sqrt(6.0f / static_cast<float>(fan_in + fan_out));
    std::uniform_real_distribution<float> dist{-limit, limit};
    for (auto& v : w)
      v = dist(rng);
  };
  mlp p;
  xavier(p.w1, 2, hidden);
  xavier(p.w2, hidden, 1);
  return p;
}

struct eval_result {
  double loss = 0;
  double accuracy = 0;
};

// Mean binary cross-entropy (and accuracy) over the points `idx` of the shard; if
// `grad` is given, also the gradient of that mean.
eval_result evaluate(const mlp& p, const shard& s, const std::vector<uint32_t>& idx,
                     mlp* grad) {
  if (grad)
    *grad = mlp{};
  eval_result res;
  std::array<float, hidden> h;
  for (auto i : idx) {
    const auto& x = s.x[i];
    float z = p.b2[0];
    for (size_t j = 0; j < hidden; ++j) {
      h[j] = std::tanh(p.w1[2 * j] * x[0] + p.w1[2 * j + 1] * x[1] + p.b1[j]);
      z += p.w2[j] * h[j];
    }
    // BCE on the logit, in the form that cannot overflow exp().
    res.loss += std::max(z, 0.0f) - s.y[i] * z + std::log1p(std::exp(-std::abs(z)));
    res.accuracy += (z > 0) == (s.y[i] > 0.5f);
    if (!grad)
      continue;
    float dz = 1.0f / (1.0f + std::exp(-z)) - s.y[i];
    grad->b2[0] += dz;
    for (size_t j = 0; j < hidden; ++j) {
      grad->w2[j] += dz * h[j];
      float da = dz * p.w2[j] * (1.0f - h[j] * h[j]);
      grad->w1[2 * j] += da * x[0];
      grad->w1[2 * j + 1] += da * x[1];
      grad->b1[j] += da;
    }
  }
  auto n = static_cast<float>(idx.size());
  if (grad)
    for (auto& [name, t] : grad->tensors())
      for (auto& v : *t)
        v /= n;
  res.loss /= n;
  res.accuracy /= n;
  return res;
}

std::string format_rate(double bytes_per_s) {
  const char* units[] = {"B/s", "KB/s", "MB/s", "GB/s"};
  size_t u = 0;
  for (; u + 1 < std::size(units) && bytes_per_s >= 1000.0; ++u)
    bytes_per_s /= 1000.0;
  return fmt::format("{:.2f} {}", bytes_per_s, units[u]);
}

int train(const args& a) {
  rw::worker_options o;
  o.connect = a.connect;
  o.rank = a.rank;
  o.job.name = a.job;
  o.token = a.token;
  o.job.num_workers = a.workers;
  o.job.optimizer.kind = rw::optimizer_kind::adam;
  o.job.optimizer.learning_rate = a.lr;
  o.job.optimizer.rescale = 0.0f; // the node averages: sum / workers
  mlp params;
  for (auto& [name, t] : params.tensors())
    o.job.tensors.push_back({name, t->size(), /*has_init*/ true});

  // Declared before the worker: its calls use these buffers in place, and the worker's
  // destructor is what guarantees no call touches them any more (even on a throw).
  mlp init_values = initial_params(), grad;
  const shard data = make_shard(a.rank);
  rw::worker w{o};
  const bool report = a.rank == 0;
  // Rank 0 sends version 0; everyone, rank 0 included, then takes it from the node, so
  // all ranks provably start from the same parameters.
  std::vector<std::future<void>> pending;
  if (report)
    for (auto& [name, t] : init_values.tensors())
      pending.push_back(w.init(name, *t));
  for (auto& [name, t] : params.tensors())
    pending.push_back(w.pull(name, *t, 0));
  for (auto& f : pending)
    f.get();

  std::vector<uint32_t> all(data.y.size());
  std::iota(all.begin(), all.end(), 0u);
  const double first_loss = report ? evaluate(params, data, all, nullptr).loss : 0.0;

  // Minibatches walk through a shuffled order of the shard, reshuffled every epoch.
  std::mt19937 rng{7 + a.rank};
  std::vector<uint32_t> order = all, batch(a.batch);
  size_t cursor = order.size();
  const double bytes_per_step = 2.0 * sizeof(float)
                                * static_cast<double>(params.elements());
  const bool tty = isatty(STDOUT_FILENO);
  const auto start = clock_type::now();
  auto last_print = start - std::chrono::seconds(1);
  uint32_t next_milestone = 0;

  for (uint32_t step = 1; step <= a.steps; ++step) {
    for (auto& b : batch) {
      if (cursor == order.size()) {
        std::shuffle(order.begin(), order.end(), rng);
        cursor = 0;
      }
      b = order[cursor++];
    }
    evaluate(params, data, batch, &grad);
    // All tensors in flight before waiting on any: calls on different tensors overlap.
    auto grads = grad.tensors();
    auto outs = params.tensors();
    pending.clear();
    for (size_t t = 0; t < grads.size(); ++t)
      pending.push_back(w.push_pull(grads[t].first, *grads[t].second, *outs[t].second));
    for (auto& f : pending)
      f.get();

    if (!report)
      continue;
    auto now = clock_type::now();
    bool last = step == a.steps;
    // A pipe or file gets a line per ~10% of the run; a terminal a redrawn line.
    bool due = tty || step >= next_milestone;
    if (!last && (!due || now - last_print < std::chrono::milliseconds(100)))
      continue;
    last_print = now;
    next_milestone = step + std::max(1u, a.steps / 10);
    double loss = evaluate(params, data, all, nullptr).loss;
    double secs = std::chrono::duration<double>(now - start).count();
    std::cout << fmt::format("{}step {}/{}  loss {:.4f}  steps/s {:.1f}  exchanged {}{}",
                             tty ? "\r" : "", step, a.steps, loss, step / secs,
                             format_rate(bytes_per_step * step / secs),
                             tty ? "\x1b[K" : "\n")
              << std::flush;
  }
  w.close();
  if (!report)
    return 0;
  if (tty)
    std::cout << "\n";
  auto final_eval = evaluate(params, data, all, nullptr);
  std::cout << fmt::format(
    "rank 0 shard ({} points): first loss {:.4f}  final loss {:.4f}  "
    "accuracy {:.1f}%\n",
    all.size(), first_loss, final_eval.loss, 100.0 * final_eval.accuracy);
  if (final_eval.loss < first_loss)
    return 0;
  std::cerr << "rw-train-demo: the loss did not fall\n";
  return 1;
}

} // namespace

int main(int argc, char** argv) {
  CLI::App app{"rw-train-demo: data-parallel MLP training through a rack-agg node",
               "rw-train-demo"};
  args a;
  app.add_option("--connect", a.connect, "HOST:PORT of the rack-agg node")
    ->capture_default_str();
  app.add_option("--rank", a.rank, "this worker's rank")->capture_default_str();
  app.add_option("--workers", a.workers, "workers in the job")
    ->check(CLI::Range(1u, rw::defaults::max_workers))
    ->capture_default_str();
  app.add_option("--steps", a.steps, "training steps")
    ->check(CLI::Range(1u, 1'000'000'000u))
    ->capture_default_str();
  app.add_option("--job", a.job, "job name (all ranks must agree)")
    ->capture_default_str();
  auto* token = app.add_option(
    "--token", a.token,
    "the job's token, from rw-shell's rw.job_create{name=..., workers=..., "
    "optimizer='adam', lr=...} (empty: a node with --open-jobs). Visible to other "
    "users in the process list: prefer --token-file");
  std::string token_file;
  app.add_option("--token-file", token_file, "read the job's token from this file")
    ->check(CLI::ExistingFile)
    ->excludes(token);
  app.add_option("--batch", a.batch, "minibatch size per worker")
    ->check(CLI::Range(1u, 1'000'000u))
    ->capture_default_str();
  app.add_option("--lr", a.lr, "Adam learning rate (run on the node)")
    ->check(CLI::Range(1e-6f, 1.0f))
    ->capture_default_str();
  CLI11_PARSE(app, argc, argv);
  if (!token_file.empty()) {
    std::ifstream in{token_file};
    std::getline(in, a.token);
    if (a.token.empty()) {
      std::cerr << "rw-train-demo: no token in " << token_file << "\n";
      return 2;
    }
  }
  try {
    return train(a);
  } catch (const rw::error& e) {
    std::cerr << fmt::format("rw-train-demo: rank {}: {} ({})\n", a.rank, e.what(),
                             rw::to_string(e.code()));
    return 2;
  } catch (const std::exception& e) {
    std::cerr << "rw-train-demo: " << e.what() << "\n";
    return 2;
  }
}

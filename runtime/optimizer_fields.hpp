#pragma once
// An optimizer's hyper-parameters to and from any Cap'n Proto struct that carries them
// under the same names: the control messages' Optimizer (schemas/control.capnp) and a
// checkpoint manifest's (schemas/checkpoint.capnp). The kind is each format's own (an
// enum on the wire, a name in a manifest), so it stays with its codec.
//
// A hyper_change travels the same way everywhere (the `hyper` frame's HyperChange, a
// manifest's ScheduledChange, CAF's serialization): a `present` byte, bit i set when
// field i is given (lr, momentum, weight_decay, beta1, beta2), and the five values, 0
// where not given.

#include <array>
#include <cstdint>
#include <optional>

#include "rackweave/job_spec.hpp"

namespace rw::runtime {

template <class Builder>
void set_hyper_parameters(Builder o, const optimizer_spec& s) {
  o.setLearningRate(s.learning_rate);
  o.setMomentum(s.momentum);
  o.setBeta1(s.beta1);
  o.setBeta2(s.beta2);
  o.setEpsilon(s.epsilon);
  o.setWeightDecay(s.weight_decay);
  o.setRescale(s.rescale);
  o.setEta(s.eta);
}

template <class Reader>
void get_hyper_parameters(Reader o, optimizer_spec& s) {
  s.learning_rate = o.getLearningRate();
  s.momentum = o.getMomentum();
  s.beta1 = o.getBeta1();
  s.beta2 = o.getBeta2();
  s.epsilon = o.getEpsilon();
  s.weight_decay = o.getWeightDecay();
  s.rescale = o.getRescale();
  s.eta = o.getEta();
}

constexpr int hyper_fields = 5;

/// The change's optional fields, in bit order.
inline std::array<std::optional<float>*, hyper_fields> fields_of(hyper_change& c) {
  return {&c.learning_rate, &c.momentum, &c.weight_decay, &c.beta1, &c.beta2};
}
inline std::array<const std::optional<float>*, hyper_fields> fields_of(
  const hyper_change& c) {
  return {&c.learning_rate, &c.momentum, &c.weight_decay, &c.beta1, &c.beta2};
}

/// Its presence bits and values (0 where not given).
inline uint8_t to_bits(const hyper_change& c, float (&values)[hyper_fields]) {
  uint8_t present = 0;
  auto fields = fields_of(c);
  for (int i = 0; i < hyper_fields; ++i) {
    values[i] = fields[i]->value_or(0.0f);
    if (*fields[i])
      present |= static_cast<uint8_t>(1u << i);
  }
  return present;
}

/// Sets the change's fields from presence bits and values; false if `present` has a bit
/// past the known fields.
inline bool from_bits(hyper_change& c, uint8_t present,
                      const float (&values)[hyper_fields]) {
  if (present >> hyper_fields)
    return false;
  auto fields = fields_of(c);
  for (int i = 0; i < hyper_fields; ++i)
    *fields[i] = (present >> i) & 1u ? std::optional<float>{values[i]} : std::nullopt;
  return true;
}

template <class Builder>
void set_hyper_change(Builder b, const hyper_change& c) {
  float v[hyper_fields];
  b.setPresent(to_bits(c, v));
  b.setAtClock(c.at_clock);
  b.setLr(v[0]);
  b.setMomentum(v[1]);
  b.setWeightDecay(v[2]);
  b.setBeta1(v[3]);
  b.setBeta2(v[4]);
}

/// false if the reader's `present` names an unknown field.
template <class Reader>
bool get_hyper_change(Reader r, hyper_change& c) {
  c.at_clock = r.getAtClock();
  float v[hyper_fields] = {r.getLr(), r.getMomentum(), r.getWeightDecay(), r.getBeta1(),
                           r.getBeta2()};
  return from_bits(c, r.getPresent(), v);
}

} // namespace rw::runtime

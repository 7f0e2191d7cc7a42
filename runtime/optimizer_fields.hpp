#pragma once
// An optimizer's hyper-parameters to and from any Cap'n Proto struct that carries them
// under the same names: the control messages' Optimizer (schemas/control.capnp) and a
// checkpoint manifest's (schemas/checkpoint.capnp). The kind is each format's own (an
// enum on the wire, a name in a manifest), so it stays with its codec.

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

} // namespace rw::runtime

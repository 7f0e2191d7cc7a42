// The wire's data-frame rules as pure functions (protocol/data_check.hpp,
// protocol/data_frame.hpp): which frame carries which operation, and every verdict a
// node gives a data frame's header before it reads the payload.

#include <catch2/catch.hpp>

#include "protocol/data_check.hpp"
#include "protocol/data_frame.hpp"
#include "protocol/half.hpp"
#include "runtime/chunking.hpp"
#include "runtime/ring.hpp"

namespace rw_unit_data_check {

using namespace rw;
using namespace rw::protocol;

namespace {

constexpr uint32_t chunk_floats = 1024;

job_spec spec_of(compression_spec::kind_t compression = compression_spec::none) {
  job_spec s;
  s.name = "check";
  s.num_workers = 2;
  s.chunk_bytes = chunk_floats * sizeof(float);
  s.tensors = {{"w", 10 * chunk_floats + 100, false}, {"b", 10, false}};
  s.compression.kind = compression;
  return s;
}

frame_header header(frame_kind kind, uint32_t tensor, uint32_t chunk, uint32_t bytes) {
  frame_header h;
  h.kind = kind;
  h.job_id = 7;
  h.rank = 1;
  h.tensor_id = tensor;
  h.chunk_index = chunk;
  h.payload_bytes = bytes;
  return h;
}

struct fixture {
  explicit fixture(const job_spec& spec) : spec(spec), table(spec, 2) {
    ctx.job_id = 7;
    ctx.rank = 1;
    ctx.routes = &table;
    ctx.job_half = half_flag(spec.compression);
    ctx.compression = &this->spec.compression;
    ctx.node_name = "node-a";
  }
  job_spec spec;
  runtime::routing_table table;
  data_context ctx;
};

} // namespace

TEST_CASE("each operation travels in its one frame kind with its flags", "[protocol]") {
  auto init = frame_for(data_op::init);
  CHECK((init.kind == frame_kind::init && init.flags == 0));
  auto push = frame_for(data_op::push);
  CHECK((push.kind == frame_kind::push && push.flags == 0));
  auto push_pull = frame_for(data_op::push_pull);
  CHECK((push_pull.kind == frame_kind::push && push_pull.flags == flag_want_result));
  CHECK(frame_for(data_op::pull).kind == frame_kind::pull);
  CHECK(frame_for(data_op::pull).flags == 0);
  CHECK(frame_for(data_op::pull, {true, false}).flags == flag_only_changed);
  CHECK(frame_for(data_op::pull, {false, true}).flags == flag_subscribe);
  CHECK(frame_for(data_op::pull, {true, true}).flags == flag_subscribe);
  // A pull's options say nothing to the other operations.
  CHECK(frame_for(data_op::push, {true, true}).flags == 0);
}

TEST_CASE("a data frame of another job or rank is refused", "[protocol]") {
  fixture f{spec_of()};
  auto h = header(frame_kind::push, 0, 0, chunk_floats * 4);
  h.job_id = 8;
  auto out = check_data_frame(h, f.ctx);
  CHECK(out.verdict == data_check::refuse);
  CHECK(out.code == errc::unknown_job);
  CHECK(out.why == "unknown job 8: this connection joined job 7");
  h.job_id = 7;
  h.rank = 0;
  out = check_data_frame(h, f.ctx);
  CHECK(out.code == errc::bad_rank);
  CHECK(out.why == "rank 0 on a connection that joined as rank 1");
}

TEST_CASE("bye, pull and hyper carry what they must", "[protocol]") {
  fixture f{spec_of()};
  auto bye = check_data_frame(header(frame_kind::bye, 0, 0, 0), f.ctx);
  CHECK((bye.verdict == data_check::receive && bye.payload == data_check::none));
  CHECK(check_data_frame(header(frame_kind::bye, 0, 0, 4), f.ctx).code
        == errc::bad_frame);
  // bye and hyper name no chunk: their tensor and chunk are not looked at.
  auto hyper = check_data_frame(header(frame_kind::hyper, 99, 99, 40), f.ctx);
  CHECK((hyper.verdict == data_check::receive && hyper.payload == data_check::hyper));
  CHECK(check_data_frame(header(frame_kind::hyper, 0, 0, 0), f.ctx).code
        == errc::bad_frame);
  CHECK(check_data_frame(header(frame_kind::hyper, 0, 0, max_hyper_bytes + 1), f.ctx).code
        == errc::bad_frame);
  auto pull = check_data_frame(header(frame_kind::pull, 0, 3, 0), f.ctx);
  CHECK((pull.verdict == data_check::receive && pull.payload == data_check::none));
  auto full = check_data_frame(header(frame_kind::pull, 0, 3, 8), f.ctx);
  CHECK((full.code == errc::bad_frame && full.why == "pull carries no payload"));
}

TEST_CASE("a state frame carries an array only when it loads one", "[protocol]") {
  fixture f{spec_of()};
  auto state = [](uint32_t chunk, uint32_t bytes, uint16_t flags, uint32_t array) {
    auto h = header(frame_kind::state, 0, chunk, bytes);
    h.flags = flags;
    h.staleness = array;
    return h;
  };
  // A read, of an array or of the version alone, carries nothing.
  auto read = check_data_frame(state(3, 0, 0, 1), f.ctx);
  CHECK((read.verdict == data_check::receive && read.payload == data_check::none));
  CHECK(check_data_frame(state(3, 4096, 0, 1), f.ctx).code == errc::bad_chunk);
  // A load of an array carries the whole chunk (the last one is shorter).
  auto load = check_data_frame(state(3, 4096, flag_state_load, 0), f.ctx);
  CHECK((load.verdict == data_check::receive && load.payload == data_check::chunk));
  CHECK(check_data_frame(state(10, 400, flag_state_load, 1), f.ctx).verdict
        == data_check::receive);
  auto wrong = check_data_frame(state(10, 4096, flag_state_load, 1), f.ctx);
  CHECK((wrong.code == errc::bad_chunk
         && wrong.why
              == "a state load of an array of chunk 0/10 carries 4096 bytes, not 400"));
  // A load of the clock carries nothing.
  CHECK(check_data_frame(state(3, 0, flag_state_load, state_version_only), f.ctx).verdict
        == data_check::receive);
  CHECK(check_data_frame(state(3, 4, flag_state_load, state_version_only), f.ctx).code
        == errc::bad_chunk);
  // Any other flag, and a chunk that does not exist, are refused.
  CHECK(check_data_frame(state(3, 0, flag_want_result, 0), f.ctx).code
        == errc::bad_frame);
  CHECK(check_data_frame(state(11, 0, 0, 0), f.ctx).code == errc::bad_chunk);
}

TEST_CASE("a chunk that does not exist is refused, naming the limits", "[protocol]") {
  fixture f{spec_of()};
  auto t = check_data_frame(header(frame_kind::push, 2, 0, 40), f.ctx);
  CHECK(t.code == errc::bad_chunk);
  CHECK(t.why == "tensor 2 does not exist (the job has 2)");
  auto c = check_data_frame(header(frame_kind::push, 0, 11, 40), f.ctx);
  CHECK(c.code == errc::bad_chunk);
  CHECK(c.why == "chunk 11 of tensor 0 does not exist (it has 11)");
}

TEST_CASE("a float32 chunk must carry exactly its bytes", "[protocol]") {
  fixture f{spec_of()};
  auto ok = check_data_frame(header(frame_kind::push, 0, 0, chunk_floats * 4), f.ctx);
  CHECK((ok.verdict == data_check::receive && ok.payload == data_check::chunk));
  // The last chunk of a tensor is shorter.
  CHECK(check_data_frame(header(frame_kind::init, 0, 10, 400), f.ctx).verdict
        == data_check::receive);
  auto short_one = check_data_frame(header(frame_kind::init, 0, 10, 404), f.ctx);
  CHECK(short_one.code == errc::bad_chunk);
  CHECK(short_one.why == "chunk 0/10 holds 400 bytes, the frame carries 404");
  auto flagged = header(frame_kind::push, 1, 0, 40);
  flagged.flags = flag_bf16;
  auto why = check_data_frame(flagged, f.ctx);
  CHECK(why.code == errc::bad_chunk);
  CHECK(
    why.why
    == "a push frame of chunk 1/0 flagged as bf16 values: job 7 sends float32 chunks");
}

TEST_CASE("a bf16 job's pushes carry 16-bit values, its inits float32", "[protocol]") {
  fixture f{spec_of(compression_spec::bf16)};
  REQUIRE(f.ctx.job_half == flag_bf16);
  auto h = header(frame_kind::push, 0, 0, half_payload_bytes(flag_bf16, chunk_floats));
  h.flags = flag_bf16;
  CHECK(check_data_frame(h, f.ctx).verdict == data_check::receive);
  h.flags = flag_fp16;
  auto fp16 = check_data_frame(h, f.ctx);
  CHECK(fp16.code == errc::bad_chunk);
  CHECK(fp16.why.find("compresses with bf16") != std::string::npos);
  h.flags = flag_half;
  CHECK(check_data_frame(h, f.ctx).why.find("both bf16 and fp16") != std::string::npos);
  auto plain = header(frame_kind::push, 0, 0, chunk_floats * 4);
  auto unflagged = check_data_frame(plain, f.ctx);
  CHECK(unflagged.code == errc::bad_chunk);
  CHECK(unflagged.why.find("carries float32 values") != std::string::npos);
  auto init = header(frame_kind::init, 0, 0, chunk_floats * 4);
  CHECK(check_data_frame(init, f.ctx).verdict == data_check::receive);
  init.flags = flag_bf16;
  CHECK(check_data_frame(init, f.ctx).code == errc::bad_chunk);
  // Where the job's pushes travel as float32 (a mirror link, shared memory).
  f.ctx.job_half = 0;
  CHECK(check_data_frame(plain, f.ctx).verdict == data_check::receive);
}

TEST_CASE("a sparse chunk carries whole pairs, never more than the dense chunk",
          "[protocol]") {
  fixture f{spec_of(compression_spec::topk)};
  auto ok = check_data_frame(header(frame_kind::push_sparse, 0, 0, 80), f.ctx);
  CHECK((ok.verdict == data_check::receive && ok.payload == data_check::chunk));
  auto none = check_data_frame(header(frame_kind::push_sparse, 0, 0, 0), f.ctx);
  CHECK((none.verdict == data_check::receive && none.payload == data_check::none));
  CHECK(check_data_frame(header(frame_kind::push_sparse, 0, 0, 81), f.ctx).code
        == errc::bad_chunk);
  CHECK(check_data_frame(header(frame_kind::push_sparse, 1, 0, 8 * 11), f.ctx).code
        == errc::bad_chunk);
}

TEST_CASE("a chunk homed elsewhere is refused, or dropped if the last ring homed it here",
          "[protocol]") {
  auto spec = spec_of();
  runtime::hash_ring ring{{"node-a", "node-b"}, 16};
  runtime::routing_table mine{spec, 2, {}, &ring, 0};
  runtime::routing_table before{spec, 2};
  uint32_t away = UINT32_MAX;
  for (uint32_t c = 0; c < 10 && away == UINT32_MAX; ++c)
    if (!mine.is_local(0, c))
      away = c;
  REQUIRE(away != UINT32_MAX);
  fixture f{spec};
  f.ctx.routes = &mine;
  auto h = header(frame_kind::push, 0, away, chunk_floats * 4);
  auto out = check_data_frame(h, f.ctx);
  CHECK(out.code == errc::bad_chunk);
  CHECK(out.why.find("homed on another node of the job, not on node-a")
        != std::string::npos);
  f.ctx.previous = &before;
  CHECK(check_data_frame(h, f.ctx).verdict == data_check::drop);
}

} // namespace rw_unit_data_check

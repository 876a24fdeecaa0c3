// Actor protocol tests on a deterministic fixture: messages are recorded and
// delivered by hand, so pipelining and back-pressure are checked by counting
// acts, never by wall time.
#include <doctest/doctest.h>

#include <cmath>
#include <deque>
#include <map>

#include "actor/actor.h"
#include "base/actor_id.h"

namespace rill {
namespace {

struct RecordingOutbox : Outbox {
  std::deque<ActorMsg> sent;
  void send(const ActorMsg& msg) override { sent.push_back(msg); }
};

constexpr uint64_t kSourceId = ActorId::make(0, DeviceType::kIo, 0, 0, 0);
constexpr uint64_t kSinkId = ActorId::make(0, DeviceType::kCpu, 0, 0, 1);

// A source reading values 0..n-1 (one per step) and a sink recording them,
// joined by one regst with `register_num` slots.
struct Pipeline {
  Pipeline(int register_num, int64_t steps) {
    DatasetField field{"v", TensorMeta{{}, DType::kF32}, {}, {}};
    for (int i = 0; i < steps; ++i) field.f32.push_back(static_cast<float>(i));
    auto dataset = Dataset::from_fields("numbers", steps, {field});
    REQUIRE(dataset.ok());
    memory.assign(register_num, 0.0f);
    std::vector<TensorView> slots;
    for (int s = 0; s < register_num; ++s) slots.push_back(TensorView{&memory[s], {1}, DType::kF32});

    OutputPort out;
    out.regst = 7;
    out.name = "v";
    out.consumers = {kSinkId};
    out.slots = slots;
    out.pending.assign(register_num, 0);
    InputPort in;
    in.regst = 7;
    in.name = "v";
    in.producer = kSourceId;
    in.slots = slots;
    in.fifo.assign(register_num, 0);

    source = std::make_unique<Actor>(kSourceId, "source", steps, std::vector<InputPort>{}, std::vector<OutputPort>{out},
                                     Body(std::in_place_type<SourceBody>, *dataset, std::vector<int>{0},
                                          BatchSampler(steps, 1, 0, 1, false, 0)));
    source->enable_trace();
    sink = std::make_unique<Actor>(
        kSinkId, "sink", steps, std::vector<InputPort>{in}, std::vector<OutputPort>{},
        Body(std::in_place_type<SinkBody>, std::vector<std::string>{"v"}, std::vector<bool>{false},
             [this](const StepMetrics& m) { seen.push_back(m.values[0]); }));
  }

  // Delivers the oldest message of the given type; false if there is none.
  bool deliver_one(MsgType type) {
    for (auto it = outbox.sent.begin(); it != outbox.sent.end(); ++it) {
      if (it->type != type) continue;
      ActorMsg msg = *it;
      outbox.sent.erase(it);
      Actor& dst = msg.dst == kSourceId ? *source : *sink;
      REQUIRE(dst.handle(msg, outbox).ok());
      return true;
    }
    return false;
  }
  void deliver_all() {
    while (!outbox.sent.empty()) {
      ActorMsg msg = outbox.sent.front();
      outbox.sent.pop_front();
      Actor& dst = msg.dst == kSourceId ? *source : *sink;
      REQUIRE(dst.handle(msg, outbox).ok());
    }
  }

  std::vector<float> memory;
  RecordingOutbox outbox;
  std::unique_ptr<Actor> source, sink;
  std::vector<double> seen;
};

}  // namespace

TEST_CASE("register_num 2 lets the producer act for step i+1 before its consumer acts for step i") {
  Pipeline p(2, 10);
  REQUIRE(p.source->start(p.outbox).ok());
  CHECK(p.source->acts() == 2);  // steps 0 and 1 written, nothing consumed yet
  CHECK(p.sink->acts() == 0);
  REQUIRE(p.deliver_one(MsgType::kReady));
  CHECK(p.sink->acts() == 1);
  CHECK(p.source->acts() == 2);  // still waiting for an ack
  REQUIRE(p.deliver_one(MsgType::kAck));
  CHECK(p.source->acts() == 3);  // step 2 overlaps the sink's step 1
}

TEST_CASE("register_num 1 serializes producer and consumer") {
  Pipeline p(1, 10);
  REQUIRE(p.source->start(p.outbox).ok());
  CHECK(p.source->acts() == 1);
  REQUIRE(p.deliver_one(MsgType::kReady));
  CHECK(p.source->acts() == 1);
  REQUIRE(p.deliver_one(MsgType::kAck));
  CHECK(p.source->acts() == 2);
}

TEST_CASE("a consumer that never acks holds its producer to register_num steps ahead") {
  for (int register_num : {1, 2, 3}) {
    Pipeline p(register_num, 20);
    REQUIRE(p.source->start(p.outbox).ok());
    // Deliver every ready, drop every ack: the sink consumes, the source stalls.
    while (p.deliver_one(MsgType::kReady)) {
    }
    CHECK(p.source->acts() == register_num);
    CHECK(p.sink->acts() == register_num);
    CHECK(p.source->describe_wait().find("ack") != std::string::npos);
  }
}

TEST_CASE("end of data drains: every step arrives in order, then both actors retire") {
  Pipeline p(2, 6);
  REQUIRE(p.source->start(p.outbox).ok());
  p.deliver_all();
  CHECK(p.seen == std::vector<double>{0, 1, 2, 3, 4, 5});
  CHECK(p.source->retired());
  CHECK(p.sink->retired());
  CHECK(p.source->trace().end_ns[5] > 0);
}

TEST_CASE("a ready for a regst the actor does not read is an error, not a crash") {
  Pipeline p(1, 3);
  RecordingOutbox out;
  Status s = p.sink->handle(ActorMsg{kSourceId, kSinkId, MsgType::kReady, 0, 99, 0}, out);
  CHECK_FALSE(s.ok());
  CHECK(s.message().find("regst 99") != std::string::npos);
  Status overflow = p.sink->handle(ActorMsg{kSourceId, kSinkId, MsgType::kReady, 5, 7, 0}, out);
  CHECK_FALSE(overflow.ok());
}

}  // namespace rill

namespace rill {
namespace {

// A pserver's block in async mode: two lanes (trainers), each with its own
// gradient input and model output, applied as each gradient comes. SGD at
// lr 0.1 on one value starting at 1, DC-ASGD with lambda 0.04. Every value
// here is a few float operations on short decimals; they are compared to
// the same operations done here in float.
TEST_CASE("a variable with lanes applies each trainer's gradient as it comes, delay-compensated") {
  constexpr uint64_t kVar = ActorId::make(0, DeviceType::kCpu, 0, 0, 5);
  const uint64_t trainer[2] = {ActorId::make(1, DeviceType::kCpu, 0, 0, 6), ActorId::make(2, DeviceType::kCpu, 0, 0, 7)};
  std::vector<float> model(2, 0.0f), grad(2, 0.0f);
  std::vector<InputPort> inputs;
  std::vector<OutputPort> outputs;
  for (int lane = 0; lane < 2; ++lane) {
    InputPort in;
    in.regst = 10 + lane;
    in.name = "grad";
    in.producer = trainer[lane];
    in.slots = {TensorView{&grad[lane], {1}, DType::kF32}};
    in.fifo.assign(1, 0);
    inputs.push_back(in);
    OutputPort out;
    out.regst = 20 + lane;
    out.name = "w.block0";
    out.consumers = {trainer[lane]};
    out.slots = {TensorView{&model[lane], {1}, DType::kF32}};
    out.pending.assign(1, 0);
    outputs.push_back(out);
  }
  Attrs fill, sgd;
  fill.set("value", 1.0);
  sgd.set("lr", 0.1);
  const float lambda = 0.04f;
  Body body(std::in_place_type<LanedVariableBody>,
            VariableBody(find_op("fill"), fill, Shape{1}, std::vector<int64_t>{0}, find_op("sgd_update"),
                         parse_params(*find_op("sgd_update"), sgd).value(), TensorMeta{{1}, DType::kF32},
                         {TensorMeta{{1}, DType::kF32}}),
            2, lambda);
  REQUIRE(std::get<LanedVariableBody>(body).init(outputs[0].slots[0], {}).ok());
  Actor var(kVar, "w.block0@0", 3, std::move(inputs), std::move(outputs), std::move(body));
  RecordingOutbox outbox;
  REQUIRE(var.start(outbox).ok());
  // Both lanes get the first version at once.
  REQUIRE(outbox.sent.size() == 2);
  CHECK(outbox.sent[0].dst == trainer[0]);
  CHECK(outbox.sent[1].dst == trainer[1]);
  CHECK(model[0] == 1.0f);
  CHECK(model[1] == 1.0f);
  outbox.sent.clear();
  auto ack = [&](int lane) {
    REQUIRE(var.handle(ActorMsg{trainer[lane], kVar, MsgType::kAck, 0, 20 + lane, 0}, outbox).ok());
  };
  auto gradient = [&](int lane, float g) {
    grad[lane] = g;
    REQUIRE(var.handle(ActorMsg{trainer[lane], kVar, MsgType::kReady, 0, 10 + lane, 0}, outbox).ok());
  };
  // Trainer 1 is first: its gradient 2, computed at w = 1 = what it was sent.
  ack(1);
  gradient(1, 2.0f);
  float w = 1.0f - 0.1f * 2.0f;
  CHECK(model[1] == w);
  CHECK(model[0] == 1.0f);  // trainer 0 still reads its version, untouched
  REQUIRE(outbox.sent.size() == 2);  // the new version to trainer 1, the gradient's ack
  CHECK(outbox.sent[0].dst == trainer[1]);
  CHECK(outbox.sent[0].type == MsgType::kReady);
  CHECK(outbox.sent[1].type == MsgType::kAck);
  outbox.sent.clear();
  // Trainer 0's gradient 1 was computed at w_sent = 1, but w has moved on:
  // DC-ASGD adds l * g * g * (w - w_sent), l = lambda / sqrt(mean square
  // of the gradients), the mean square 0.05 * 2 * 2 after the first, then
  // 0.95 of that + 0.05 * 1 * 1.
  ack(0);
  gradient(0, 1.0f);
  const float mean_square = 0.95f * (0.05f * 2.0f * 2.0f) + 0.05f * 1.0f * 1.0f;
  const float compensated = 1.0f + lambda / std::sqrt(mean_square) * 1.0f * 1.0f * (w - 1.0f);
  w = static_cast<float>(w - 0.1 * compensated);
  CHECK(model[0] == w);
  // The values themselves (what a checkpoint reads) are the latest.
  std::vector<float> read;
  REQUIRE(std::get<LanedVariableBody>(var.body()).read_model(TensorView{model.data(), {1}, DType::kF32}, &read).ok());
  CHECK(read == std::vector<float>{w});
}

}  // namespace
}  // namespace rill

// Wire tests: control messages round-trip through an Envelope, data-plane
// actor messages through their size-prefixed header, and corrupt, truncated,
// foreign or mistyped buffers are kDataLoss, never a crash.
#include <cstring>
#include <random>

#include <doctest/doctest.h>

#include "comm/wire.h"

using namespace rill;
using namespace rill::comm;

namespace {

wire::DoneT sample_done() {
  wire::DoneT done;
  done.job_id = 42;
  done.node = 3;
  done.ok = true;
  done.result_json = R"({"loss": 0.25})";
  auto v = std::make_unique<wire::VariableValuesT>();
  v->name = "w1";
  v->shape = {4, 3};
  v->values = {1, 2, 3, 4, 5, 6};
  v->offset = 6;
  done.variables.push_back(std::move(v));
  return done;
}

}  // namespace

TEST_CASE("control messages round-trip through an Envelope") {
  wire::JoinT join;
  join.rank = 2;
  join.version = "0.1.0";
  join.plan_schema_hash = 0xfeedbeefcafe;
  join.address = "127.0.0.3";
  join.devices = "cpu:2";
  auto bytes = encode_message(join);
  auto parsed = parse_message<wire::Join>(bytes);
  REQUIRE(parsed.ok());
  CHECK(parsed->get()->rank() == 2);
  CHECK(parsed->get()->version()->str() == "0.1.0");
  CHECK(parsed->get()->plan_schema_hash() == 0xfeedbeefcafe);
  CHECK(parsed->get()->address()->str() == "127.0.0.3");

  auto done_bytes = encode_message(sample_done());
  auto done = parse_message<wire::Done>(done_bytes);
  REQUIRE(done.ok());
  std::unique_ptr<wire::DoneT> native(done->get()->UnPack());
  CHECK(native->job_id == 42);
  CHECK(native->result_json == R"({"loss": 0.25})");
  REQUIRE(native->variables.size() == 1);
  CHECK(native->variables[0]->shape == std::vector<int64_t>{4, 3});
  CHECK(native->variables[0]->values == std::vector<float>{1, 2, 3, 4, 5, 6});
  CHECK(native->variables[0]->offset == 6);

  wire::StatusReplyT status;
  status.state = "running";
  status.running_job = 7;
  status.queued_jobs = {8, 9};
  auto node = std::make_unique<wire::NodeInfoT>();
  node->rank = 0;
  node->address = "127.0.0.1";
  node->ctrl_port = 9988;
  node->data_port = 9989;
  status.nodes.push_back(std::move(node));
  auto reply_bytes = encode_message(std::move(status));
  auto reply = parse_message<wire::StatusReply>(reply_bytes);
  REQUIRE(reply.ok());
  CHECK(reply->get()->queued_jobs()->size() == 2);
  CHECK(reply->get()->nodes()->Get(0)->data_port() == 9989);

  auto heartbeat = encode_message(wire::HeartbeatT{});
  auto envelope = parse_envelope(heartbeat);
  REQUIRE(envelope.ok());
  CHECK(envelope->get()->message_type() == wire::Message::Heartbeat);
}

TEST_CASE("a message of another type is kDataLoss naming both") {
  wire::AbortT abort;
  abort.job_id = 1;
  abort.reason = "node 2 lost";
  auto bytes = encode_message(abort);
  auto parsed = parse_message<wire::Start>(bytes);
  REQUIRE_FALSE(parsed.ok());
  CHECK(parsed.status().code() == Code::kDataLoss);
  CHECK(parsed.status().message() == "wire: expected a Start message, got Abort");
}

TEST_CASE("every truncation of an Envelope is kDataLoss") {
  auto bytes = encode_message(sample_done());
  for (size_t size = 0; size < bytes.size(); ++size) {
    auto parsed = parse_message<wire::Done>(std::span<const std::byte>(bytes.data(), size));
    CAPTURE(size);
    REQUIRE_FALSE(parsed.ok());
    CHECK(parsed.status().code() == Code::kDataLoss);
    CHECK(parsed.status().message().find("Done") != std::string::npos);
  }
}

TEST_CASE("corrupted Envelopes are rejected or read safely, never a crash") {
  auto good = encode_message(sample_done());
  std::mt19937 random(12345);
  int rejected = 0;
  for (int trial = 0; trial < 3000; ++trial) {
    auto bytes = good;
    int flips = 1 + trial % 4;
    for (int f = 0; f < flips; ++f) bytes[random() % bytes.size()] = static_cast<std::byte>(random() & 0xff);
    auto parsed = parse_message<wire::Done>(bytes);
    if (!parsed.ok()) {
      CHECK(parsed.status().code() == Code::kDataLoss);
      ++rejected;
      continue;
    }
    // Verified: reading every field stays in bounds.
    std::unique_ptr<wire::DoneT> native(parsed->get()->UnPack());
    (void)native;
  }
  CHECK(rejected > 0);
}

TEST_CASE("foreign, empty and unaligned buffers") {
  std::vector<std::byte> empty;
  auto parsed = parse_envelope(empty);
  CHECK(parsed.status().code() == Code::kDataLoss);
  CHECK(parsed.status().message().find("only 0 bytes") != std::string::npos);

  std::string text = "GET / HTTP/1.1\r\nHost: x\r\n\r\n";
  auto foreign = parse_envelope(std::as_bytes(std::span<const char>(text.data(), text.size())));
  CHECK(foreign.status().code() == Code::kDataLoss);
  CHECK(foreign.status().message().find("identifier RLWR") != std::string::npos);

  // An Envelope at an odd address is read from an aligned copy.
  wire::PlanPartT part;
  part.job_id = 5;
  part.plan = {1, 2, 3, 4, 5};
  auto bytes = encode_message(part);
  std::vector<std::byte> shifted(bytes.size() + 1);
  std::memcpy(shifted.data() + 1, bytes.data(), bytes.size());
  auto plan = parse_message<wire::PlanPart>(std::span<const std::byte>(shifted.data() + 1, bytes.size()));
  REQUIRE(plan.ok());
  CHECK(plan->get()->plan()->size() == 5);
  CHECK(plan->get()->job_id() == 5);
}

TEST_CASE("actor messages round-trip with their payloads") {
  flatbuffers::FlatBufferBuilder builder;
  std::vector<wire::ActorMessageHeader> messages = {
      wire::ActorMessageHeader(1, 2, 10, 7, 0, 16, 1, wire::ActorMessageType::Ready),
      wire::ActorMessageHeader(3, 4, 11, 7, 0, 0, 0, wire::ActorMessageType::Ack),
  };
  auto header = encode_actor_messages(builder, messages);
  std::vector<std::byte> message(header.begin(), header.end());
  for (int i = 0; i < 16; ++i) message.push_back(static_cast<std::byte>(i));
  auto view = parse_actor_messages(message);
  REQUIRE(view.ok());
  REQUIRE(view->header->messages()->size() == 2);
  const auto* ready = view->header->messages()->Get(0);
  CHECK(ready->src() == 1);
  CHECK(ready->dst() == 2);
  CHECK(ready->regst() == 10);
  CHECK(ready->step() == 7);
  CHECK(ready->slot() == 1);
  CHECK(ready->type() == wire::ActorMessageType::Ready);
  auto payload = view->payload(*ready);
  REQUIRE(payload.size() == 16);
  CHECK(payload[15] == std::byte{15});
  CHECK(view->header->messages()->Get(1)->type() == wire::ActorMessageType::Ack);

  // Encoding again into the same builder reuses its memory.
  const void* before = builder.GetBufferPointer();
  (void)encode_actor_messages(builder, messages);
  CHECK(builder.GetBufferPointer() == before);
}

TEST_CASE("corrupt actor messages are kDataLoss") {
  flatbuffers::FlatBufferBuilder builder;
  std::vector<wire::ActorMessageHeader> ready = {
      wire::ActorMessageHeader(1, 2, 10, 7, 4, 16, 1, wire::ActorMessageType::Ready)};
  auto header = encode_actor_messages(builder, ready);
  std::vector<std::byte> message(header.begin(), header.end());
  message.resize(message.size() + 8);  // payload claims [4, 20) of an 8-byte body
  auto view = parse_actor_messages(message);
  CHECK(view.status().code() == Code::kDataLoss);
  CHECK(view.status().message().find("beyond the 8-byte body") != std::string::npos);

  for (size_t size = 0; size < header.size(); ++size) {
    std::vector<std::byte> cut(header.begin(), header.begin() + static_cast<long>(size));
    CAPTURE(size);
    CHECK(parse_actor_messages(cut).status().code() == Code::kDataLoss);
  }

  std::vector<wire::ActorMessageHeader> strange = {
      wire::ActorMessageHeader(1, 2, 10, 7, 0, 0, 1, static_cast<wire::ActorMessageType>(9))};
  auto bad = encode_actor_messages(builder, strange);
  std::vector<std::byte> bad_copy(bad.begin(), bad.end());
  CHECK(parse_actor_messages(bad_copy).status().message().find("unknown type 9") != std::string::npos);

  std::mt19937 random(7);
  for (int trial = 0; trial < 2000; ++trial) {
    std::vector<std::byte> copy(header.begin(), header.end());
    copy[random() % copy.size()] = static_cast<std::byte>(random() & 0xff);
    auto parsed = parse_actor_messages(copy);
    if (parsed.ok()) {
      for (const auto* m : *parsed->header->messages()) (void)parsed->payload(*m);
    } else {
      CHECK(parsed.status().code() == Code::kDataLoss);
    }
  }
}

// Control-plane envelopes and data-plane actor-message headers: round trips,
// and corrupt or truncated bytes from a peer are errors, never crashes.
#include <doctest/doctest.h>

#include <random>

#include "runtime/actor_wire.h"
#include "runtime/control_codec.h"
#include "runtime/control_generated.h"

namespace rill {

TEST_CASE("control messages survive encoding") {
  control::PlanPart part{7,  1, 0x1234, R"({"name": "j"})", "cpu:2", 1, 300, 3,
                         {{"w", {2, 1}, {0, 0}, {2, 1}, {1.5f, -2.f}}},
                         {{"w/momentum", {}, {}, {}, {0.25f, 0.5f}}}, 40, 20};
  auto decoded = control::decode(control::encode(part));
  REQUIRE(decoded.ok());
  auto* p = std::get_if<control::PlanPart>(&*decoded);
  REQUIRE(p != nullptr);
  CHECK(p->job_id == 7);
  CHECK(p->tag_base == 0x1234);
  CHECK(p->job_text == part.job_text);
  CHECK(p->devices == "cpu:2");
  CHECK(p->mode == 1);
  CHECK(p->steps == 300);
  CHECK(p->activation_register_num == 3);
  CHECK(p->initial_values[0].values == std::vector<float>{1.5f, -2.f});
  CHECK(p->initial_state[0].name == "w/momentum");
  CHECK(p->start_step == 40);
  CHECK(p->snapshot_every == 20);

  control::Join join{3, "0.1.0", control::schema_hash(), "127.0.0.4:9988", "cpu:2"};
  auto j = control::decode(control::encode(join));
  REQUIRE(j.ok());
  CHECK(std::get<control::Join>(*j).schema_hash == control::schema_hash());
  CHECK(std::get<control::Join>(*j).devices == "cpu:2");
}

TEST_CASE("a corrupt or truncated control message is kDataLoss, never a crash") {
  std::string bytes = control::encode(control::Done{3, 0, 1, "", {{"w", {4}, {0}, {4}, {1, 2, 3, 4}}}, 1.5, {1, 2}});
  for (size_t n = 0; n < bytes.size(); ++n) {
    auto decoded = control::decode(std::string_view(bytes.data(), n));
    if (!decoded.ok()) CHECK(decoded.status().code() == Code::kDataLoss);
  }
  std::mt19937 rng(1);
  for (int trial = 0; trial < 3000; ++trial) {
    std::string damaged = bytes;
    damaged[rng() % damaged.size()] = static_cast<char>(rng());
    auto decoded = control::decode(damaged);  // must not crash
    if (!decoded.ok()) CHECK(decoded.status().code() == Code::kDataLoss);
  }
  CHECK(control::decode("not a rill message at all").status().code() == Code::kDataLoss);
}

TEST_CASE("an envelope that names a message type but carries no table is kDataLoss, for every type") {
  // 24 bytes any host reaching a control port could send: they once passed the
  // verifier and were dereferenced as null.
  for (int type = 1; type <= static_cast<int>(control::fb::Message::MAX); ++type) {
    CAPTURE(type);
    flatbuffers::FlatBufferBuilder b;
    auto start = b.StartTable();
    b.AddElement<uint8_t>(control::fb::Envelope::VT_MESSAGE_TYPE, static_cast<uint8_t>(type), 0);
    b.Finish(flatbuffers::Offset<control::fb::Envelope>(b.EndTable(start)), control::fb::EnvelopeIdentifier());
    std::string bytes(reinterpret_cast<const char*>(b.GetBufferPointer()), b.GetSize());
    auto decoded = control::decode(bytes);
    REQUIRE_FALSE(decoded.ok());
    CHECK(decoded.status().code() == Code::kDataLoss);
  }
}

TEST_CASE("actor message headers carry the message and leave the body after them") {
  ActorMsg msg{0x0001000000000007ull, 0x0002000000000009ull, MsgType::kReady, 1, 42, 99};
  std::vector<std::byte> header;
  encode_actor_message(msg, &header);
  std::vector<std::byte> message = header;
  for (int i = 0; i < 8; ++i) message.push_back(static_cast<std::byte>(i));
  ActorMsg out;
  std::span<const std::byte> body;
  REQUIRE(decode_actor_message(message, &out, &body).ok());
  CHECK(out.src == msg.src);
  CHECK(out.dst == msg.dst);
  CHECK(out.type == MsgType::kReady);
  CHECK(out.slot == 1);
  CHECK(out.regst == 42);
  CHECK(out.step == 99);
  CHECK(body.size() == 8);
  for (size_t n = 0; n < header.size(); ++n)
    CHECK_FALSE(decode_actor_message(std::span<const std::byte>(message.data(), n), &out, &body).ok());
  std::mt19937 rng(2);
  for (int trial = 0; trial < 2000; ++trial) {
    std::vector<std::byte> damaged = message;
    damaged[rng() % header.size()] = static_cast<std::byte>(rng());
    Status s = decode_actor_message(damaged, &out, &body);  // must not crash
    if (!s.ok()) CHECK(s.code() == Code::kDataLoss);
  }
}

}  // namespace rill

// Control-plane envelopes and data-plane actor-message headers: round trips,
// and corrupt or truncated bytes from a peer are errors, never crashes.
#include <doctest/doctest.h>

#include <xxhash.h>

#include <cstring>
#include <functional>
#include <random>
#include <set>
#include <span>

#include "runtime/node/actor_wire.h"
#include "runtime/node/node_runtime.h"
#include "runtime/cluster/control_codec.h"
#include "runtime/cluster/control_generated.h"

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

  auto beat = control::decode(control::encode(control::Heartbeat{2, 9, 1, 123.5, 4.25}));
  REQUIRE(beat.ok());
  const auto& h = std::get<control::Heartbeat>(*beat);
  CHECK(h.node == 2);
  CHECK(h.job_id == 9);
  CHECK(h.phase == 1);
  CHECK(h.steps == 123.5);
  CHECK(h.busy_seconds == 4.25);
  CHECK(std::get<control::Heartbeat>(*control::decode(control::encode(control::Heartbeat{1}))).job_id == -1);
  control::Heartbeat busy{1, 4, 0, 10, 2};
  busy.threads = {{"cpu0.0", 120, 1.5, 0}, {"comm5.0", 40, 0.25, 3}};
  busy.received_bytes_from = {4096, 0};
  busy.link_rates = {{2, 11.5}, {0, 120.25}};
  auto b = std::get<control::Heartbeat>(*control::decode(control::encode(busy)));
  REQUIRE(b.threads.size() == 2);
  CHECK(b.threads[1].name == "comm5.0");
  CHECK(b.threads[1].acts == 40);
  CHECK(b.threads[1].busy_seconds == 0.25);
  CHECK(b.threads[1].queued == 3);
  CHECK(b.received_bytes_from == std::vector<int64_t>{4096, 0});
  REQUIRE(b.link_rates.size() == 2);
  CHECK(b.link_rates[0].peer == 2);
  CHECK(b.link_rates[0].mb_per_s == 11.5);  // exact in f32
  CHECK(b.link_rates[1].peer == 0);
  CHECK(b.link_rates[1].mb_per_s == 120.25);

  control::Submit submit;
  submit.job_text = "{}";
  submit.resume = "latest";
  submit.max_restarts = 3;
  auto sub = control::decode(control::encode(submit));
  REQUIRE(sub.ok());
  CHECK(std::get<control::Submit>(*sub).max_restarts == 3);
  CHECK(std::get<control::Submit>(*sub).resume == "latest");
  auto bye = control::decode(control::encode(control::Shutdown{"node 2 was declared lost", true}));
  REQUIRE(bye.ok());
  CHECK(std::get<control::Shutdown>(*bye).reason == "node 2 was declared lost");
  CHECK(std::get<control::Shutdown>(*bye).join_again);
  auto last = control::decode(control::encode(control::Shutdown{}));
  REQUIRE(last.ok());
  CHECK_FALSE(std::get<control::Shutdown>(*last).join_again);
  auto back = control::decode(control::encode(control::Rejoined{2, "", {"10.0.0.9", 9989}}));
  REQUIRE(back.ok());
  CHECK(std::get<control::Rejoined>(*back).node == 2);
  CHECK(std::get<control::Rejoined>(*back).data_endpoint == comm::Endpoint{"10.0.0.9", 9989});
  auto reply = control::decode(
      control::encode(control::JoinReply{true, "", 2, "", {{"10.0.0.1", 9989}, {"fd00::9", 7001}}}));
  REQUIRE(reply.ok());
  CHECK(std::get<control::JoinReply>(*reply).data_endpoints ==
        std::vector<comm::Endpoint>{{"10.0.0.1", 9989}, {"fd00::9", 7001}});
  auto plain = control::decode(control::encode(control::JoinReply{false, "no", 2}));
  REQUIRE(plain.ok());
  CHECK(std::get<control::JoinReply>(*plain).data_endpoints.empty());
  // Bounded before they are copied: more data ports than a cluster has
  // nodes, an address longer than a host name.
  auto many = control::decode(control::encode(
      control::JoinReply{true, "", 2, "", std::vector<comm::Endpoint>(size_t{1} << 17, {"10.0.0.1", 9989})}));
  REQUIRE_FALSE(many.ok());
  CHECK(many.status().code() == Code::kDataLoss);
  auto long_address = control::decode(control::encode(control::Rejoined{2, "", {std::string(300, 'a'), 9989}}));
  REQUIRE_FALSE(long_address.ok());
  CHECK(long_address.status().message().find("address of 300 bytes") != std::string::npos);
  auto stop = control::decode(control::encode(control::Stop{7, true}));
  REQUIRE(stop.ok());
  CHECK(std::get<control::Stop>(*stop).job_id == 7);
  CHECK(std::get<control::Stop>(*stop).now);
  auto hold = control::decode(control::encode(control::Hold{7, 2}));
  REQUIRE(hold.ok());
  CHECK(std::get<control::Hold>(*hold).phase == 2);
  auto held = control::decode(control::encode(control::Held{7, 2, 3, 93}));
  REQUIRE(held.ok());
  CHECK(std::get<control::Held>(*held).node == 3);
  CHECK(std::get<control::Held>(*held).last_begun == 93);
  auto end = control::decode(control::encode(control::EndAt{7, 2, 94}));
  REQUIRE(end.ok());
  CHECK(std::get<control::EndAt>(*end).end == 94);
  // A node's error crosses with its code (restarts decide by it).
  control::Done done;
  done.error = "stuck";
  done.code = Code::kDeadlineExceeded;
  auto back_done = control::decode(control::encode(done));
  REQUIRE(back_done.ok());
  CHECK(std::get<control::Done>(*back_done).code == Code::kDeadlineExceeded);
  auto ack = control::decode(control::encode(control::PlanAck{7, 0, 1, "corrupt", Code::kDataLoss}));
  REQUIRE(ack.ok());
  CHECK(std::get<control::PlanAck>(*ack).code == Code::kDataLoss);
  // The carried state a node writes into checkpoints: tensor and offset.
  control::PlanAck carrying{7, 0, 1, "", Code::kOk, {{"compression/b/error", {}, {1, 0}, {}}}};
  auto carried = control::decode(control::encode(carrying));
  REQUIRE(carried.ok());
  REQUIRE(std::get<control::PlanAck>(*carried).carried.size() == 1);
  CHECK(std::get<control::PlanAck>(*carried).carried[0].tensor == "compression/b/error");
  CHECK(std::get<control::PlanAck>(*carried).carried[0].offset == Shape{1, 0});
  // A list past what any node writes is refused as it is decoded, not copied.
  carrying.carried.assign(70000, carrying.carried[0]);
  auto flood = control::decode(control::encode(carrying));
  CHECK(flood.status().code() == Code::kDataLoss);
  auto result = control::decode(control::encode(control::Result{7, "{}", "gone", Code::kUnavailable}));
  REQUIRE(result.ok());
  CHECK(std::get<control::Result>(*result).code == Code::kUnavailable);
  // A code this build does not know, or an error without one, is never taken for success.
  CHECK(control::node_error(Code::kOk, "node 1", "odd").code() == Code::kInternal);
  CHECK(control::node_error(Code::kDataLoss, "node 1", "bad").message() == "node 1: bad");
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
    const size_t at = rng() % damaged.size();
    damaged[at] = static_cast<char>(damaged[at] ^ (1 + rng() % 255));
    auto decoded = control::decode(damaged);  // must not crash
    // The checksum catches every change, a tensor value's too.
    REQUIRE_FALSE(decoded.ok());
    CHECK(decoded.status().code() == Code::kDataLoss);
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
    const uint64_t sum = XXH3_64bits(bytes.data(), bytes.size());  // a sender that checksums its garbage
    bytes.append(reinterpret_cast<const char*>(&sum), sizeof sum);
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

// A slot of `rows` rows of `width` floats, row r zero where zero(r).
std::vector<float> rows_slot(int rows, int width, const std::function<bool(int)>& zero) {
  std::vector<float> v(static_cast<size_t>(rows * width));
  for (int r = 0; r < rows; ++r)
    for (int c = 0; c < width; ++c) v[static_cast<size_t>(r * width + c)] = zero(r) ? 0.0f : 1.0f + r + 0.01f * c;
  return v;
}

std::span<const std::byte> bytes_of(const std::vector<float>& v) { return std::as_bytes(std::span<const float>(v)); }

// Both steps of the encoding, as NodeRun::route takes them.
bool append_zero_rows(std::span<const std::byte> slot, int64_t rows, std::vector<std::byte>* out) {
  std::vector<uint8_t> kept;
  if (!mark_zero_rows(slot, rows, &kept)) return false;
  append_kept_rows(slot, rows, kept, out);
  return true;
}

TEST_CASE("a slot with zero rows crosses as a bitmap and the other rows, and comes back the same") {
  CHECK(zero_row_rows(std::vector<int64_t>{256, 8, 16}) == 2048);  // a lookup's rows of its dim
  CHECK(zero_row_rows(std::vector<int64_t>{64, 10}) == 64);
  CHECK(zero_row_rows(std::vector<int64_t>{512}) == 0);  // vectors and scalars cross whole
  CHECK(zero_row_rows(std::vector<int64_t>{}) == 0);
  // 37 rows of 16 floats, every third row non-zero (a block's rows among
  // three); a row with a single non-zero element and one of -0.0 are not
  // zero rows (bitwise: -0.0 must come back as -0.0).
  std::vector<float> slot = rows_slot(37, 16, [](int r) { return r % 3 != 0; });
  slot[5 * 16 + 15] = 7.0f;
  slot[7 * 16 + 3] = -0.0f;
  std::vector<std::byte> out = {std::byte{0xAB}};  // what is there stays
  REQUIRE(append_zero_rows(bytes_of(slot), 37, &out));
  CHECK(out[0] == std::byte{0xAB});
  const size_t kept = 13 + 2;  // rows 0, 3, ..., 36, and rows 5 and 7
  CHECK(out.size() == 1 + 5 + kept * 16 * sizeof(float));
  std::vector<float> back(slot.size(), 99.0f);
  REQUIRE(expand_zero_rows(std::span<const std::byte>(out).subspan(1), 37,
                           std::as_writable_bytes(std::span<float>(back)))
              .ok());
  CHECK(std::memcmp(back.data(), slot.data(), slot.size() * sizeof(float)) == 0);
  // Every row zero: only the bitmap.
  std::vector<float> zeros(64 * 4, 0.0f);
  out.clear();
  REQUIRE(append_zero_rows(bytes_of(zeros), 64, &out));
  CHECK(out.size() == 8);
}

TEST_CASE("zero rows are left out only where it is worth it") {
  std::vector<std::byte> out;
  // Fewer than a quarter of the rows zero: the slot crosses whole.
  std::vector<float> dense = rows_slot(40, 8, [](int r) { return r % 5 == 0; });  // 8 of 40
  CHECK_FALSE(append_zero_rows(bytes_of(dense), 40, &out));
  CHECK(out.empty());
  std::vector<float> quarter = rows_slot(40, 8, [](int r) { return r % 4 == 0; });  // 10 of 40
  CHECK(append_zero_rows(bytes_of(quarter), 40, &out));
  // Rows under 16 bytes, fewer than 4 rows, or rows that do not divide the slot: whole.
  out.clear();
  std::vector<float> narrow = rows_slot(40, 3, [](int) { return true; });
  CHECK_FALSE(append_zero_rows(bytes_of(narrow), 40, &out));
  std::vector<float> few = rows_slot(3, 16, [](int) { return true; });
  CHECK_FALSE(append_zero_rows(bytes_of(few), 3, &out));
  std::vector<float> odd = rows_slot(40, 8, [](int) { return true; });
  CHECK_FALSE(append_zero_rows(bytes_of(odd), 41, &out));
  CHECK(out.empty());
}

TEST_CASE("a zero-row body that does not fit its slot is a data loss, never a write past it") {
  std::vector<float> slot = rows_slot(12, 8, [](int r) { return r % 2 == 0; });
  std::vector<std::byte> good;
  REQUIRE(append_zero_rows(bytes_of(slot), 12, &good));
  std::vector<float> into(slot.size());
  auto writable = std::as_writable_bytes(std::span<float>(into));
  auto expand = [&](std::vector<std::byte> body, int64_t rows) { return expand_zero_rows(body, rows, writable); };
  CHECK(expand(good, 12).ok());
  std::vector<std::byte> cut(good.begin(), good.end() - 1);
  CHECK(expand(cut, 12).code() == Code::kDataLoss);
  std::vector<std::byte> extra = good;
  extra.push_back(std::byte{0});
  CHECK(expand(extra, 12).code() == Code::kDataLoss);
  std::vector<std::byte> marked = good;
  marked[0] |= std::byte{0x01};  // one more row marked than came
  CHECK(expand(marked, 12).code() == Code::kDataLoss);
  std::vector<std::byte> beyond = good;
  beyond[1] |= std::byte{0x80};  // row 15 of 12
  Status s = expand(beyond, 12);
  CHECK(s.code() == Code::kDataLoss);
  CHECK(s.message().find("marks row 15 of a slot of 12 rows") != std::string::npos);
  CHECK(expand({}, 12).code() == Code::kDataLoss);
  CHECK(expand(good, 5).code() == Code::kDataLoss);  // rows that do not divide the slot
  // The flag crosses in the header.
  ActorMsg msg{1, 2, MsgType::kReady, 0, 3, 4};
  std::vector<std::byte> header;
  encode_actor_message(msg, &header, WireExtras{true, 17, 0xfeedbeefcafe});
  ActorMsg back;
  std::span<const std::byte> body;
  WireExtras extras;
  REQUIRE(decode_actor_message(header, &back, &body, &extras).ok());
  CHECK(extras.zero_rows);
  CHECK(extras.seq == 17);
  CHECK(extras.checksum == 0xfeedbeefcafe);
  encode_actor_message(msg, &header);
  REQUIRE(decode_actor_message(header, &back, &body, &extras).ok());
  CHECK_FALSE(extras.zero_rows);
  CHECK(extras.seq == 0);
}


TEST_CASE("every phase of every job has a tag range of its own; past the last, a phase is refused") {
  // Phases 0 and 16 once shared a range (the phase's low 4 bits): a job
  // restarted often, with evaluation, could reuse a draining run's tags.
  std::set<uint64_t> bases;
  for (int64_t job : {int64_t{1}, int64_t{2}, int64_t{3}, (int64_t{1} << 24) - 1})
    for (int phase : {0, 1, 15, 16, 17, 31, 32, 1000, (1 << 20) - 1}) {
      auto base = run_tag_base(job, phase);
      REQUIRE(base.ok());
      CHECK(*base % kTagsPerRun == 0);
      CHECK(bases.insert(*base).second);
    }
  // Ranges of kTagsPerRun from distinct bases never overlap: bases are multiples of it.
  CHECK(run_tag_base(1, 1 << 20).status().code() == Code::kFailedPrecondition);
  CHECK_FALSE(run_tag_base(int64_t{1} << 24, 0).ok());
  CHECK_FALSE(run_tag_base(1, -1).ok());
}

}  // namespace rill

// In-memory replicas of a node's pieces (live membership for layouts that
// split variables): the messages that carry pieces and the whole tensors
// made from them (runtime/cluster/memory_pieces.h), a node's store
// (replica_store.h), the stream that carries them (memory_transfer.h), the
// control messages that say who holds what, and the Replicator between two
// nodes of one run (replicator.h).
#include <doctest/doctest.h>

#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "comm/transport.h"
#include "runtime/cluster/control_codec.h"
#include "runtime/cluster/memory_pieces.h"
#include "runtime/cluster/memory_transfer.h"
#include "runtime/cluster/replica_store.h"
#include "runtime/cluster/replicator.h"

namespace rill {
namespace {

namespace ctl = control;
using std::chrono::milliseconds;

std::vector<float> iota(size_t n, float from) {
  std::vector<float> out(n);
  for (size_t i = 0; i < n; ++i) out[i] = from + static_cast<float>(i);
  return out;
}

// Rows [row, row + rows) of a [4, 3] tensor whose element (r, c) is base + 3r + c.
ctl::Tensor rows_of(const std::string& name, int64_t row, int64_t rows, float base) {
  return ctl::Tensor{name, {4, 3}, {row, 0}, {rows, 3}, iota(static_cast<size_t>(rows * 3), base + 3.0f * row)};
}

TEST_CASE("pieces packed into messages come back as whole tensors, each element placed once") {
  // Two halves of w (rows 0-1 and 2-3) and of its momentum, in messages of
  // at most about one piece's bytes: one piece a message.
  auto messages = pack_tensors({rows_of("w", 0, 2, 0), rows_of("w", 2, 2, 0)},
                               {rows_of("w/momentum", 0, 2, 100), rows_of("w/momentum", 2, 2, 100)}, 5, 1, 30, 100,
                               "a test's pieces");
  REQUIRE(messages.ok());
  CHECK(messages->size() == 4);
  WholeTensors whole({{"w", {4, 3}}});
  for (const std::string& m : *messages) REQUIRE(whole.add_message(m, 5, 30).ok());
  CHECK(whole.check_whole({"w"}).ok());
  CHECK(whole.values["w"] == iota(12, 0));
  CHECK(whole.state["w/momentum"] == iota(12, 100));
  // A larger bound packs them together.
  auto one = pack_tensors({rows_of("w", 0, 2, 0), rows_of("w", 2, 2, 0)}, {}, 5, 1, 30, size_t{1} << 20, "pieces");
  REQUIRE(one.ok());
  CHECK(one->size() == 1);
}

TEST_CASE("pieces that do not make a whole tensor, or do not fit it, are named") {
  const std::map<std::string, Shape> shapes = {{"w", {4, 3}}, {"v", {4, 3}}, {"u", {4, 3}}};
  auto half = pack_tensors({rows_of("w", 0, 2, 0)}, {}, 5, 1, 30, size_t{1} << 20, "pieces");
  REQUIRE(half.ok());
  WholeTensors whole(shapes);
  REQUIRE(whole.add_message(half->front(), 5, 30).ok());
  Status missing = whole.check_whole({"w"});
  CHECK(missing.code() == Code::kDataLoss);
  CHECK(missing.message() == "the pieces of 'w' cover 6 of its 12 elements");
  CHECK(whole.check_whole({"w", "b"}).message() == "no piece of variable 'b' came");
  // The same piece again (a repeat, not the other half), and one that
  // overlaps it: with a gap of as many elements, counting alone would pass.
  Status twice = whole.add_message(half->front(), 5, 30);
  CHECK(twice.code() == Code::kDataLoss);
  CHECK(twice.message() == "the piece of 'w' at [0, 0] overlaps the one at [0, 0]");
  auto across = pack_tensors({rows_of("w", 1, 2, 0)}, {}, 5, 1, 30, size_t{1} << 20, "pieces");
  REQUIRE(across.ok());
  CHECK(whole.add_message(across->front(), 5, 30).message() == "the piece of 'w' at [1, 0] overlaps the one at [0, 0]");
  // Another job's or step's pieces.
  CHECK(whole.add_message(half->front(), 6, 30).code() == Code::kDataLoss);
  CHECK(whole.add_message(half->front(), 5, 31).code() == Code::kDataLoss);
  // A piece past its tensor's end, or whose values are not its shape's.
  auto outside = pack_tensors({rows_of("v", 3, 2, 0)}, {}, 5, 1, 30, size_t{1} << 20, "pieces");
  REQUIRE(outside.ok());
  Status past = WholeTensors(shapes).add_message(outside->front(), 5, 30);
  CHECK(past.code() == Code::kDataLoss);
  CHECK(past.message().find("a piece of 'v' (6 values, [2, 3] at [3, 0]) does not fit its tensor [4, 3]") !=
        std::string::npos);
  ctl::Tensor short_piece = rows_of("u", 0, 2, 0);
  short_piece.values.pop_back();
  auto shorter = pack_tensors({short_piece}, {}, 5, 1, 30, size_t{1} << 20, "pieces");
  REQUIRE(shorter.ok());
  CHECK(WholeTensors(shapes).add_message(shorter->front(), 5, 30).code() == Code::kDataLoss);
  // Bytes that are not a message at all.
  CHECK(WholeTensors(shapes).add_message("not a message", 5, 30).code() == Code::kDataLoss);
}

// What a peer says of a piece's tensor is checked against the job's own
// shapes before anything is made: a node 0 that took the peer's word would
// allocate a tensor of any size, or (a rank past 8, a shape whose element
// count overflows, an offset near 2^63) write outside what it allocated.
TEST_CASE("pieces that name a tensor the job lacks, another shape, or overflowing offsets are refused by name") {
  const std::map<std::string, Shape> shapes = {{"w", {4, 3}}};
  auto refused = [&](ctl::Tensor t, bool state = false) {
    auto packed = state ? pack_tensors({}, {std::move(t)}, 5, 1, 30, size_t{1} << 20, "pieces")
                        : pack_tensors({std::move(t)}, {}, 5, 1, 30, size_t{1} << 20, "pieces");
    REQUIRE(packed.ok());
    WholeTensors whole(shapes);
    Status added = whole.add_message(packed->front(), 5, 30);
    CHECK(added.code() == Code::kDataLoss);
    return added.message();
  };
  CHECK(refused(ctl::Tensor{"huge", {int64_t{1} << 28}, {0}, {0}, {}}) ==
        "a piece of 'huge' came, which is no variable of this job");
  CHECK(refused(ctl::Tensor{"x/m", {4, 3}, {0, 0}, {4, 3}, iota(12, 0)}, true) ==
        "a piece of 'x/m' came, which is no variable's optimizer state of this job");
  // State of a variable of the job, but not a state any optimizer keeps.
  CHECK(refused(ctl::Tensor{"w/anything", {4, 3}, {0, 0}, {4, 3}, iota(12, 0)}, true) ==
        "a piece of 'w/anything' came, which is no variable's optimizer state of this job");
  CHECK(refused(ctl::Tensor{"w", {4, 3}, {0, 0}, {4, 3}, iota(12, 0)}, true) ==
        "a piece of 'w' came, which is no variable's optimizer state of this job");
  for (const char* state : {"w/adam_m", "w/adam_v", "w/momentum"}) {
    auto packed = pack_tensors({}, {ctl::Tensor{state, {4, 3}, {0, 0}, {4, 3}, iota(12, 0)}}, 5, 1, 30, size_t{1} << 20,
                               "pieces");
    REQUIRE(packed.ok());
    WholeTensors whole(shapes);
    CHECK(whole.add_message(packed->front(), 5, 30).ok());
  }
  Shape deep(40, 1);
  deep[0] = 0;
  CHECK(refused(ctl::Tensor{"w", deep, {}, deep, {}}).find("says its tensor is") != std::string::npos);
  CHECK(refused(ctl::Tensor{"w", {(int64_t{1} << 62) + 1, 4}, {0, 0}, {1, 4}, iota(4, 0)}).find("says its tensor is") !=
        std::string::npos);
  CHECK(refused(ctl::Tensor{"w", {4, 3}, {std::numeric_limits<int64_t>::max() - 1, 0}, {2, 3}, iota(6, 0)})
            .find("does not fit its tensor [4, 3]") != std::string::npos);
  CHECK(refused(ctl::Tensor{"w", {4, 3}, {0, 0}, {-2, -3}, iota(6, 0)}).find("does not fit") != std::string::npos);
  // A name with control bytes is named escaped.
  CHECK(refused(ctl::Tensor{"e\x1b[2Jvil", {2}, {0}, {2}, iota(2, 0)}).find("'e\\x1b[2Jvil'") != std::string::npos);
}

TEST_CASE("a node's replica store keeps its own last three steps and each source's last two, for one job") {
  ReplicaStore store;
  store.begin_run(1, 0);
  for (int64_t step : {10, 20, 30, 40}) store.keep_own(1, 0, step, {"own " + std::to_string(step)});
  CHECK(store.own_steps(1) == std::vector<int64_t>{20, 30, 40});
  for (int64_t step : {10, 20, 30}) store.keep_replica(1, 0, 2, step, {"from 2 at " + std::to_string(step)});
  store.keep_replica(1, 0, 0, 30, {});  // a source with no pieces of its own: complete, and empty
  CHECK(store.replica_steps(1) == std::map<int, std::vector<int64_t>>{{0, {30}}, {2, {20, 30}}});
  auto own = store.own_at(1, 30);
  REQUIRE(own.ok());
  CHECK(**own == std::vector<std::string>{"own 30"});
  auto replica = store.replica_at(1, 2, 20);
  REQUIRE(replica.ok());
  CHECK(**replica == std::vector<std::string>{"from 2 at 20"});
  CHECK(store.own_at(1, 10).status().code() == Code::kNotFound);
  CHECK(store.replica_at(1, 2, 10).status().message() ==
        "this node holds no replica of rank 2's pieces of job 1 after step 10");
  CHECK(store.replica_at(1, 3, 20).status().code() == Code::kNotFound);
  CHECK(store.bytes() > 0);
  // A later run of the job (another plan's pieces) starts empty; the same run again keeps them.
  store.begin_run(1, 0);
  CHECK(store.own_steps(1) == std::vector<int64_t>{20, 30, 40});
  store.begin_run(1, 0);
  CHECK(store.own_steps(1) == std::vector<int64_t>{20, 30, 40});
  store.begin_run(1, 1);
  CHECK(store.own_steps(1).empty());
  CHECK(store.replica_steps(1).empty());
  store.keep_own(1, 1, 40, {"own 40"});
  // An old run still ending (phase 0) keeps nothing any more.
  store.keep_own(1, 0, 50, {"stale"});
  store.keep_replica(1, 0, 2, 50, {"stale"});
  CHECK(store.own_steps(1) == std::vector<int64_t>{40});
  CHECK(store.replica_steps(1).empty());
  // Another job's pieces replace every one of this job's.
  store.keep_own(2, 0, 5, {"job 2"});
  CHECK(store.own_steps(1).empty());
  CHECK(store.replica_steps(2).empty());
  CHECK(store.own_steps(2) == std::vector<int64_t>{5});
  CHECK(store.own_at(1, 40).status().code() == Code::kNotFound);
  // An earlier job's, late, changes nothing.
  store.keep_own(1, 0, 60, {"late"});
  store.keep_replica(1, 0, 2, 60, {"late"});
  CHECK(store.own_steps(2) == std::vector<int64_t>{5});
  CHECK(store.own_steps(1).empty());
}

TEST_CASE("a stream's messages arrive whole after their headers, and a malformed header is named") {
  auto transports = comm::make_inproc_transports(2);
  const StreamTags tags{(uint64_t{9} << 20) + kReplicaChunkTag, (uint64_t{9} << 20) + kReplicaAckTag};
  std::string big(kMemoryWindow * kMemoryChunkBytes + 5, '\0');
  for (size_t i = 0; i < big.size(); ++i) big[i] = static_cast<char>(i * 7);
  const std::vector<std::string> messages = {"first", big};
  Status sent;
  std::thread sender([&] {
    for (uint64_t i = 0; i < messages.size() && sent.ok(); ++i)
      sent = send_stream_message(*transports[0], 1, tags, StreamHeader{40, i, messages.size(), messages[i].size()},
                                 messages[i], milliseconds(10000));
  });
  for (uint64_t i = 0; i < messages.size(); ++i) {
    auto header = receive_stream_header(*transports[1], 0, tags, comm::Clock::now() + milliseconds(10000),
                                        size_t{1} << 30);
    REQUIRE(header.ok());
    CHECK(header->step == 40);
    CHECK(header->index == i);
    CHECK(header->count == 2);
    auto body = receive_stream_body(*transports[1], 0, tags, *header, milliseconds(10000));
    REQUIRE(body.ok());
    CHECK(*body == messages[i]);
  }
  sender.join();
  CHECK(sent.ok());
  // Nothing yet: the deadline passes.
  CHECK(receive_stream_header(*transports[1], 0, tags, comm::Clock::now() + milliseconds(20), 100).status().code() ==
        Code::kDeadlineExceeded);
  // A header announcing more than the receiver takes.
  std::thread liar([&] {
    (void)send_stream_message(*transports[0], 1, tags, StreamHeader{40, 0, 1, 200}, std::string(200, 'x'),
                              milliseconds(200));
  });
  auto refused = receive_stream_header(*transports[1], 0, tags, comm::Clock::now() + milliseconds(10000), 100);
  liar.join();
  CHECK(refused.status().code() == Code::kDataLoss);
  CHECK(refused.status().message().find("is malformed: step 40, message 0 of 1, 200 bytes (at most 100)") !=
        std::string::npos);
  // More messages than a stream holds, and a message of no bytes (each would
  // keep a receiver taking headers without end).
  for (const StreamHeader& bad : {StreamHeader{40, 0, kMostStreamMessages + 1, 10}, StreamHeader{40, 0, 2, 0}}) {
    std::vector<std::byte> chunk;  // what followed the last refused header, left unread
    (void)transports[1]->recv(0, tags.chunk, &chunk, comm::Clock::now() + milliseconds(300));
    std::thread sender([&] {
      (void)send_stream_message(*transports[0], 1, tags, bad, std::string(bad.bytes, 'x'), milliseconds(200));
    });
    auto malformed = receive_stream_header(*transports[1], 0, tags, comm::Clock::now() + milliseconds(10000), 100);
    sender.join();
    CHECK(malformed.status().code() == Code::kDataLoss);
    CHECK_MESSAGE(malformed.status().message().find("is malformed") != std::string::npos, malformed.status().message());
  }
}

TEST_CASE("Gather, a node's replicas in its Done and its replica pieces in its ack survive encoding") {
  auto gather = ctl::decode(ctl::encode(ctl::Gather{7, 3, 0x300000, 40, false, {2, 5}, 90.5}));
  REQUIRE(gather.ok());
  const auto& g = std::get<ctl::Gather>(*gather);
  CHECK(g.job_id == 7);
  CHECK(g.phase == 3);
  CHECK(g.tag_base == 0x300000);
  CHECK(g.step == 40);
  CHECK_FALSE(g.own);
  CHECK(g.replicas_of == std::vector<int>{2, 5});
  CHECK(g.patience_s == 90.5);
  ctl::Done done;
  done.replica_own = {30, 40};
  done.replicas = {{2, {30}}, {0, {}}};
  auto d = std::get<ctl::Done>(*ctl::decode(ctl::encode(done)));
  CHECK(d.replica_own == std::vector<int64_t>{30, 40});
  REQUIRE(d.replicas.size() == 2);
  CHECK(d.replicas[0].source == 2);
  CHECK(d.replicas[0].steps == std::vector<int64_t>{30});
  CHECK(d.replicas[1].steps.empty());
  ctl::PlanAck ack{7, 0, 1, "", Code::kOk, {}, 4};
  CHECK(std::get<ctl::PlanAck>(*ctl::decode(ctl::encode(ack))).replica_pieces == 4);
  ctl::PlanPart part;
  part.replica_every = 10;
  part.replica_copies = 2;
  CHECK(std::get<ctl::PlanPart>(*ctl::decode(ctl::encode(part))).replica_every == 10);
  CHECK(std::get<ctl::PlanPart>(*ctl::decode(ctl::encode(part))).replica_copies == 2);
  ctl::Submit submit;
  CHECK(std::get<ctl::Submit>(*ctl::decode(ctl::encode(submit))).replica_every == -1);
  CHECK(std::get<ctl::Submit>(*ctl::decode(ctl::encode(submit))).replica_copies == 0);
  submit.replica_every = 0;
  submit.replica_copies = 3;
  CHECK(std::get<ctl::Submit>(*ctl::decode(ctl::encode(submit))).replica_every == 0);
  CHECK(std::get<ctl::Submit>(*ctl::decode(ctl::encode(submit))).replica_copies == 3);
}

// Node n's replicator of two nodes of one run, each the other's buddy.
Replicator::Options buddy_options(comm::Transport& transport, ReplicaStore& store, int n, int64_t job,
                                  milliseconds patience) {
  Replicator::Options options;
  options.transport = &transport;
  options.store = &store;
  options.job = job;
  options.tag_base = static_cast<uint64_t>(job) << 20;
  options.to = options.from = options.from_ranks = {1 - n};
  options.most = size_t{1} << 20;
  options.most_bytes = most_piece_bytes({{"w", {4, 3}}, {"b", {3}}});
  options.last_step = 100;
  options.patience = patience;
  options.me = "node " + std::to_string(n);
  return options;
}

// Two nodes of one run, each the other's buddy: each keeps its own pieces
// of each replica step and the other's, once all of that step's pieces came.
TEST_CASE("two nodes' replicators each keep their own pieces and the other's, step by step") {
  auto transports = comm::make_inproc_transports(2);
  ReplicaStore stores[2];
  std::unique_ptr<Replicator> replicators[2];
  for (int n = 0; n < 2; ++n) {
    // Node n writes rows [2n, 2n + 2) of w and b's whole on node 0.
    std::vector<SnapshotPiece> pieces = {{"w", {2 * n, 0}}};
    if (n == 0) pieces.push_back({"b", {0}});
    replicators[n] = std::make_unique<Replicator>(
        std::move(pieces), buddy_options(*transports[static_cast<size_t>(n)], stores[n], n, 4, milliseconds(10000)));
  }
  for (int64_t step : {5, 10}) {
    for (int n = 0; n < 2; ++n) {
      const float base = 100.0f * static_cast<float>(step);
      replicators[n]->add(step, VariablePiece{"w", {4, 3}, {2 * n, 0}, {2, 3}, iota(6, base + 6.0f * n),
                                              {{"momentum", iota(6, -base)}}});
    }
    replicators[0]->add(step, VariablePiece{"b", {3}, {0}, {3}, iota(3, 7), {}});
  }
  // Each node has its own at both steps as soon as they are sent; the
  // other's once received.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (std::chrono::steady_clock::now() < deadline &&
         (stores[0].replica_steps(4)[1] != std::vector<int64_t>{5, 10} ||
          stores[1].replica_steps(4)[0] != std::vector<int64_t>{5, 10}))
    std::this_thread::sleep_for(milliseconds(10));
  for (auto& r : replicators) r->stop();
  CHECK(stores[0].own_steps(4) == std::vector<int64_t>{5, 10});
  CHECK(stores[1].own_steps(4) == std::vector<int64_t>{5, 10});
  REQUIRE(stores[0].replica_steps(4)[1] == std::vector<int64_t>{5, 10});
  REQUIRE(stores[1].replica_steps(4)[0] == std::vector<int64_t>{5, 10});
  // Node 1's replica of node 0 and node 0's own pieces after step 10... and
  // node 1's own: the whole model of that step.
  WholeTensors whole({{"w", {4, 3}}, {"b", {3}}});
  for (const std::string& m : **stores[1].replica_at(4, 0, 10)) REQUIRE(whole.add_message(m, 4, 10).ok());
  for (const std::string& m : **stores[1].own_at(4, 10)) REQUIRE(whole.add_message(m, 4, 10).ok());
  CHECK(whole.check_whole({"w", "b"}).ok());
  CHECK(whole.values["w"] == iota(12, 1000));
  CHECK(whole.values["b"] == iota(3, 7));
  std::vector<float> momentum = iota(6, -1000);
  momentum.insert(momentum.end(), momentum.begin(), momentum.end());
  CHECK(whole.state["w/momentum"] == momentum);
}

// Three nodes, each copying to the next two (--replica-copies 2): every
// node keeps both others' pieces, so any one node alone holds the whole
// model of a step (two nodes lost at once leave the third all it needs).
TEST_CASE("with two copies, each of three nodes keeps both others' pieces and one alone holds the whole model") {
  auto transports = comm::make_inproc_transports(3);
  ReplicaStore stores[3];
  std::unique_ptr<Replicator> replicators[3];
  for (int n = 0; n < 3; ++n) {
    Replicator::Options options =
        buddy_options(*transports[static_cast<size_t>(n)], stores[n], n, 9, milliseconds(10000));
    options.to = {(n + 1) % 3, (n + 2) % 3};    // nearest first
    options.from = {(n + 2) % 3, (n + 1) % 3};  // the node before, then the one before it
    options.from_ranks = options.from;
    options.most_bytes = most_piece_bytes({{"w", {3, 3}}});
    replicators[n] = std::make_unique<Replicator>(std::vector<SnapshotPiece>{{"w", {n, 0}}}, std::move(options));
  }
  for (int64_t step : {5, 10})
    for (int n = 0; n < 3; ++n)  // node n holds row n of w
      replicators[n]->add(step, VariablePiece{"w", {3, 3}, {n, 0}, {1, 3},
                                              iota(3, 100.0f * static_cast<float>(step) + 3.0f * n), {}});
  auto both_held = [&] {
    for (int n = 0; n < 3; ++n)
      for (int other : {(n + 1) % 3, (n + 2) % 3})
        if (stores[n].replica_steps(9)[other] != std::vector<int64_t>{5, 10}) return false;
    return true;
  };
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (std::chrono::steady_clock::now() < deadline && !both_held()) std::this_thread::sleep_for(milliseconds(10));
  for (auto& r : replicators) r->stop();
  REQUIRE(both_held());
  for (int n = 0; n < 3; ++n) {
    CAPTURE(n);
    WholeTensors whole({{"w", {3, 3}}});
    for (const std::string& m : **stores[n].own_at(9, 10)) REQUIRE(whole.add_message(m, 9, 10).ok());
    for (int other : {(n + 1) % 3, (n + 2) % 3})
      for (const std::string& m : **stores[n].replica_at(9, other, 10)) REQUIRE(whole.add_message(m, 9, 10).ok());
    CHECK(whole.check_whole({"w"}).ok());
    CHECK(whole.values["w"] == iota(9, 1000));
  }
}

// Node 0 copies to nodes 1 and 2 (--replica-copies 2), and node 1 hangs
// without being lost: it takes nothing and acks nothing, so the copy to it
// waits out the patience (a minute here). Node 2's copy does not wait for
// it: the buddies are sent to at once.
TEST_CASE("a buddy that hangs holds back only its own copy, not the next buddy's") {
  auto transports = comm::make_inproc_transports(3);
  ReplicaStore stores[3];
  Replicator::Options sender = buddy_options(*transports[0], stores[0], 0, 12, milliseconds(60000));
  sender.to = {1, 2};
  sender.from = sender.from_ranks = {};
  Replicator::Options receiver = buddy_options(*transports[2], stores[2], 2, 12, milliseconds(60000));
  receiver.to = {};
  receiver.from = receiver.from_ranks = {0};
  Replicator node0(std::vector<SnapshotPiece>{{"w", {0, 0}}}, std::move(sender));
  Replicator node2({}, std::move(receiver));
  node0.add(5, VariablePiece{"w", {2, 3}, {0, 0}, {2, 3}, iota(6, 5), {}});
  // Well within node 1's minute, sent one after the other it would come after.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (std::chrono::steady_clock::now() < deadline && stores[2].replica_steps(12)[0] != std::vector<int64_t>{5})
    std::this_thread::sleep_for(milliseconds(10));
  CHECK(stores[2].replica_steps(12)[0] == std::vector<int64_t>{5});
  node0.stop();  // ends the wait for node 1's ack
  node2.stop();
}

// A run that ended well waits for its last step's copies (a loss in the
// eval goes on from them), also where a node has no pieces (a pserver's
// trainer): it sends word of none, so its buddy does not wait out the
// patience (a minute here) for it.
TEST_CASE("finishing a run waits for the last step's copies both ways, a node with no pieces sending word of none") {
  auto transports = comm::make_inproc_transports(2);
  ReplicaStore stores[2];
  std::unique_ptr<Replicator> replicators[2];
  for (int n = 0; n < 2; ++n) {
    std::vector<SnapshotPiece> pieces;
    if (n == 0) pieces = {{"w", {0, 0}}};  // node 1 holds nothing
    replicators[n] = std::make_unique<Replicator>(
        std::move(pieces), buddy_options(*transports[static_cast<size_t>(n)], stores[n], n, 6, milliseconds(60000)));
  }
  for (int64_t step : {10, 13})  // every 10 steps, and the run's last
    replicators[0]->add(step, VariablePiece{"w", {2, 3}, {0, 0}, {2, 3}, iota(6, static_cast<float>(step)), {}});
  const auto start = std::chrono::steady_clock::now();
  std::thread other([&] { replicators[1]->finish(13); });
  replicators[0]->finish(13);
  other.join();
  CHECK(std::chrono::steady_clock::now() - start < std::chrono::seconds(30));
  // Each holds the other's last step: node 0's pieces, and node 1's none.
  CHECK(stores[1].replica_steps(6)[0] == std::vector<int64_t>{10, 13});
  CHECK(stores[0].replica_steps(6)[1] == std::vector<int64_t>{13});
  CHECK((*stores[0].replica_at(6, 1, 13))->empty());
  for (auto& r : replicators) r->stop();
}

// What the node before sends is bounded before a byte of it is taken: a
// copy weighs at most what the model's pieces may (most_piece_bytes), of a
// step of the run, its messages in order from the first. Each refused
// message past the bounds comes whole (its chunks are read as headers that
// do not add up, and dropped); one out of turn is read and dropped; an
// honest copy after them is kept, and only it.
TEST_CASE("a node takes from the node before only copies of the run's steps, in order, within the model's weight") {
  auto transports = comm::make_inproc_transports(2);
  ReplicaStore store;
  Replicator::Options options = buddy_options(*transports[1], store, 1, 8, milliseconds(10000));
  options.to.clear();  // node 1 only keeps node 0's
  Replicator replicator({}, options);
  const StreamTags tags{options.tag_base + kReplicaChunkTag, options.tag_base + kReplicaAckTag};
  auto attack = [&](StreamHeader h) {
    // No ack comes for a refused message: given up after 100 ms.
    (void)send_stream_message(*transports[0], 1, tags, h, std::string(h.bytes, 'x'), milliseconds(100));
  };
  attack({101, 0, 1, 100});                    // past the run's last step (100)
  attack({10, 0, 1, options.most_bytes + 1});  // more than the model's pieces weigh
  // Message 1 before message 0, within the bounds: read and dropped, its
  // sender acknowledged (as one whose message 0 was dropped goes on).
  CHECK(send_stream_message(*transports[0], 1, tags, {20, 1, 2, 100}, std::string(100, 'x'), milliseconds(10000)).ok());
  auto message = pack_tensors({ctl::Tensor{"w", {4, 3}, {0, 0}, {2, 3}, iota(6, 1)}}, {}, 8, 0, 30, size_t{1} << 20,
                              "a test");
  REQUIRE(message.ok());
  REQUIRE(send_stream(*transports[0], 1, tags, 30, *message, milliseconds(10000)).ok());
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (std::chrono::steady_clock::now() < deadline && store.replica_steps(8)[0].empty())
    std::this_thread::sleep_for(milliseconds(10));
  replicator.stop();
  CHECK(store.replica_steps(8)[0] == std::vector<int64_t>{30});
}

}  // namespace
}  // namespace rill

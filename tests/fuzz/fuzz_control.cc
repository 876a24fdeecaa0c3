// The control codec (runtime/cluster/control_codec.h): every message an agent
// or client receives on a control port. An input is an envelope without its
// trailing XXH3: the target decodes it as it came (the checksum path) and
// with its checksum appended, so that mutations reach the verifier and the
// reader behind the checksum.
#include <xxhash.h>

#include "runtime/cluster/control_codec.h"
#include "tests/fuzz/fuzz_target.h"

namespace ctl = rill::control;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string bytes(reinterpret_cast<const char*>(data), size);
  (void)ctl::decode(bytes);
  const uint64_t sum = XXH3_64bits(bytes.data(), bytes.size());
  bytes.append(reinterpret_cast<const char*>(&sum), sizeof sum);
  auto message = ctl::decode(bytes);
  if (message.ok()) (void)ctl::encode(*message);  // what decodes encodes again
  return 0;
}

std::vector<std::string> rill_fuzz_seeds() {
  ctl::Heartbeat beat;
  beat.node = 1;
  beat.job_id = 3;
  beat.threads.push_back({"device 0", 10, 0.5, 2});
  beat.received_bytes_from = {0, 100};
  beat.checkpoint_bytes = int64_t{1} << 40;
  ctl::Submit replicated{"{}", "job.json", true, "cpu:1", 20, {}, "", 0, false, 1, 5};
  replicated.replica_copies = 2;
  ctl::PlanPart part;
  part.job_id = 3;
  part.members = {0, 2, 1};
  part.replica_every = 5;
  part.replica_copies = 2;
  std::vector<std::string> seeds = {
      ctl::encode(ctl::Join{1, "0.1", ctl::schema_hash(), "127.0.0.2:9988", "cpu:1"}),
      ctl::encode(ctl::Submit{"{}", "job.json", true, "cpu:2", 10, {"train.steps=1"}, "latest", 2}),
      ctl::encode(beat), ctl::encode(ctl::StatusRequest{}), ctl::encode(ctl::Shutdown{"bye"}),
      ctl::encode(ctl::LinkError{1, "broken"}), ctl::encode(ctl::Stop{3, false}), ctl::encode(ctl::Hold{3, 1}),
      ctl::encode(ctl::Held{3, 1, 2, 93}), ctl::encode(ctl::EndAt{3, 1, 94}), ctl::encode(replicated),
      ctl::encode(part), ctl::encode(ctl::Rejoined{2, std::string(32, 'a'), {"10.0.0.9", 9989}}),
      ctl::encode(ctl::JoinReply{true, "", 2, std::string(64, 'b'), {{"10.0.0.1", 9989}, {"10.0.0.9", 9989}}})};
  for (std::string& s : seeds) s.resize(s.size() - sizeof(uint64_t));  // the target appends the checksum
  return seeds;
}

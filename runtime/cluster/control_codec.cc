#include "runtime/cluster/control_codec.h"

#include <xxhash.h>

#include <algorithm>
#include <cstring>

#include <flatbuffers/flatbuffers.h>
#include <fmt/format.h>

#include "base/fnv1a.h"
#include "runtime/cluster/control_generated.h"
#include "runtime/cluster/control_schema_text.h"
#include "runtime/cluster/plan_schema_text.h"

namespace rill::control {
namespace {

namespace fb = rill::control::fb;
using flatbuffers::FlatBufferBuilder;
using flatbuffers::Offset;

std::string str(const flatbuffers::String* s) { return s ? s->str() : std::string(); }
std::string raw(const flatbuffers::Vector<uint8_t>* v) {
  return v ? std::string(reinterpret_cast<const char*>(v->data()), v->size()) : std::string();
}
// A node's data port off the wire: an address no longer than a host name
// may be (entries may share one string: each is copied).
constexpr size_t kMostAddressBytes = 255;
// Data ports a JoinReply may list: a cluster's nodes, and no more.
constexpr size_t kMostDataEndpoints = size_t{1} << 16;
StatusOr<comm::Endpoint> endpoint_of(const fb::DataEndpoint* e) {
  if (e == nullptr) return comm::Endpoint{};
  if (e->address() != nullptr && e->address()->size() > kMostAddressBytes)
    return data_loss("a data port's address of {} bytes, past {}", e->address()->size(), kMostAddressBytes);
  return comm::Endpoint{str(e->address()), e->port()};
}

Offset<flatbuffers::Vector<uint8_t>> raw(FlatBufferBuilder& b, const std::string& bytes) {
  return b.CreateVector(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size());
}

// A code off the wire: one this build does not know is kInternal.
Code code_of(uint8_t wire) {
  return wire <= static_cast<uint8_t>(Code::kPermissionDenied) ? static_cast<Code>(wire) : Code::kInternal;
}

template <typename T>
std::vector<T> vec(const flatbuffers::Vector<T>* v) {
  return v ? std::vector<T>(v->begin(), v->end()) : std::vector<T>{};
}

Offset<flatbuffers::Vector<Offset<fb::NamedTensor>>> tensors(FlatBufferBuilder& b, const std::vector<Tensor>& ts) {
  std::vector<Offset<fb::NamedTensor>> out;
  for (const Tensor& t : ts)
    out.push_back(fb::CreateNamedTensor(b, b.CreateString(t.name), b.CreateVector(t.shape), b.CreateVector(t.offset),
                                        b.CreateVector(t.values), b.CreateVector(t.piece_shape)));
  return b.CreateVector(out);
}

std::vector<Tensor> tensors(const flatbuffers::Vector<Offset<fb::NamedTensor>>* ts) {
  std::vector<Tensor> out;
  if (!ts) return out;
  for (const fb::NamedTensor* t : *ts)
    out.push_back(Tensor{str(t->name()), vec(t->shape()), vec(t->offset()), vec(t->piece_shape()), vec(t->values())});
  return out;
}

struct Encoder {
  FlatBufferBuilder& b;
  std::pair<fb::Message, Offset<void>> operator()(const Join& m) {
    return {fb::Message::Join, fb::CreateJoin(b, m.rank, b.CreateString(m.version), m.schema_hash,
                                              b.CreateString(m.address), b.CreateString(m.devices),
                                              raw(b, m.data_session), b.CreateString(m.machines))
                                   .Union()};
  }
  std::pair<fb::Message, Offset<void>> operator()(const JoinReply& m) {
    std::vector<Offset<fb::DataEndpoint>> endpoints;
    for (const comm::Endpoint& e : m.data_endpoints)
      endpoints.push_back(fb::CreateDataEndpoint(b, b.CreateString(e.address), e.port));
    return {fb::Message::JoinReply, fb::CreateJoinReply(b, m.ok, b.CreateString(m.error), m.world,
                                                        raw(b, m.data_sessions), b.CreateVector(endpoints))
                                        .Union()};
  }
  std::pair<fb::Message, Offset<void>> operator()(const Submit& m) {
    return {fb::Message::Submit,
            fb::CreateSubmit(b, b.CreateString(m.job_text), b.CreateString(m.file_name), m.follow,
                             b.CreateString(m.devices), m.steps, b.CreateVectorOfStrings(m.overrides),
                             b.CreateString(m.resume), m.max_restarts, m.trace, m.min_nodes, m.replica_every,
                             m.replica_copies)
                .Union()};
  }
  std::pair<fb::Message, Offset<void>> operator()(const SubmitReply& m) {
    return {fb::Message::SubmitReply,
            fb::CreateSubmitReply(b, m.job_id, b.CreateString(m.error), m.queued_behind).Union()};
  }
  std::pair<fb::Message, Offset<void>> operator()(const PlanPart& m) {
    return {fb::Message::PlanPart,
            fb::CreatePlanPart(b, m.job_id, m.phase, m.tag_base, b.CreateString(m.job_text),
                               b.CreateString(m.devices), m.mode, m.steps, m.activation_register_num,
                               tensors(b, m.initial_values), tensors(b, m.initial_state), m.start_step,
                               m.snapshot_every, m.trace, b.CreateVector(m.members), m.keep_steps, m.kept_step,
                               b.CreateVector(m.memory_parts), m.replica_every, m.replica_copies)
                .Union()};
  }
  std::pair<fb::Message, Offset<void>> operator()(const CheckpointWritten& m) {
    std::vector<Offset<fb::CheckpointPiece>> pieces;
    for (const CheckpointPiece& p : m.pieces)
      pieces.push_back(fb::CreateCheckpointPiece(b, b.CreateString(p.tensor), b.CreateVector(p.shape),
                                                 b.CreateVector(p.offset), b.CreateVector(p.piece_shape),
                                                 static_cast<uint8_t>(p.dtype)));
    return {fb::Message::CheckpointWritten,
            fb::CreateCheckpointWritten(b, m.job_id, m.phase, m.steps_done, m.node, b.CreateString(m.file), m.bytes,
                                        b.CreateVector(pieces), b.CreateString(m.error), static_cast<uint8_t>(m.code),
                                        m.block_seconds, m.write_seconds)
                .Union()};
  }
  std::pair<fb::Message, Offset<void>> operator()(const PlanAck& m) {
    std::vector<Offset<fb::CheckpointPiece>> carried;
    for (const CheckpointPiece& p : m.carried)
      carried.push_back(fb::CreateCheckpointPiece(b, b.CreateString(p.tensor), 0, b.CreateVector(p.offset)));
    return {fb::Message::PlanAck, fb::CreatePlanAck(b, m.job_id, m.phase, m.node, b.CreateString(m.error),
                                                    static_cast<uint8_t>(m.code), b.CreateVector(carried),
                                                    m.replica_pieces)
                                      .Union()};
  }
  std::pair<fb::Message, Offset<void>> operator()(const Start& m) {
    return {fb::Message::Start, fb::CreateStart(b, m.job_id, m.phase).Union()};
  }
  std::pair<fb::Message, Offset<void>> operator()(const Done& m) {
    std::vector<Offset<fb::ActTrace>> traces;
    for (const ActTrace& t : m.traces)
      traces.push_back(fb::CreateActTrace(b, t.id, b.CreateString(t.name), t.acts_per_step, b.CreateString(t.collective),
                                          b.CreateVector(t.begin_ns), b.CreateVector(t.end_ns), b.CreateVector(t.done_ns)));
    std::vector<Offset<fb::ReplicaHeld>> replicas;
    for (const Done::Replica& r : m.replicas)
      replicas.push_back(fb::CreateReplicaHeld(b, r.source, b.CreateVector(r.steps)));
    return {fb::Message::Done, fb::CreateDone(b, m.job_id, m.phase, m.node, b.CreateString(m.error),
                                              tensors(b, m.variables), m.seconds, b.CreateVector(m.received_from),
                                              b.CreateVector(m.received_bytes_from), static_cast<uint8_t>(m.code),
                                              b.CreateVector(traces), m.kept_first, m.kept_last, m.kept_whole,
                                              b.CreateString(m.comm), b.CreateVector(m.replica_own),
                                              b.CreateVector(replicas))
                                  .Union()};
  }
  std::pair<fb::Message, Offset<void>> operator()(const Progress& m) {
    return {fb::Message::Progress, fb::CreateProgress(b, m.job_id, b.CreateString(m.line)).Union()};
  }
  std::pair<fb::Message, Offset<void>> operator()(const Result& m) {
    return {fb::Message::Result,
            fb::CreateResult(b, m.job_id, b.CreateString(m.result_json), b.CreateString(m.error),
                             static_cast<uint8_t>(m.code), b.CreateString(m.trace_json))
                .Union()};
  }
  std::pair<fb::Message, Offset<void>> operator()(const StatusRequest&) {
    return {fb::Message::StatusRequest, fb::CreateStatusRequest(b).Union()};
  }
  std::pair<fb::Message, Offset<void>> operator()(const StatusReply& m) {
    return {fb::Message::StatusReply, fb::CreateStatusReply(b, b.CreateString(m.status_json)).Union()};
  }
  std::pair<fb::Message, Offset<void>> operator()(const Heartbeat& m) {
    std::vector<Offset<fb::ThreadPace>> threads;
    for (const Heartbeat::Thread& t : m.threads)
      threads.push_back(fb::CreateThreadPace(b, b.CreateString(t.name), t.acts, t.busy_seconds, t.queued));
    std::vector<fb::PeerRate> rates;
    for (const comm::PeerRate& r : m.link_rates) rates.emplace_back(r.peer, static_cast<float>(r.mb_per_s));
    return {fb::Message::Heartbeat,
            fb::CreateHeartbeat(b, m.node, m.job_id, m.phase, m.steps, m.busy_seconds, b.CreateVector(threads),
                                b.CreateVector(m.received_bytes_from), b.CreateVectorOfStructs(rates),
                                b.CreateString(m.comm), m.checkpoint_bytes, m.checkpoint_step)
                .Union()};
  }
  std::pair<fb::Message, Offset<void>> operator()(const Abort& m) {
    return {fb::Message::Abort, fb::CreateAbort(b, m.job_id, m.phase, b.CreateString(m.reason)).Union()};
  }
  std::pair<fb::Message, Offset<void>> operator()(const Shutdown& m) {
    return {fb::Message::Shutdown, fb::CreateShutdown(b, b.CreateString(m.reason), m.join_again).Union()};
  }
  std::pair<fb::Message, Offset<void>> operator()(const LinkError& m) {
    return {fb::Message::LinkError, fb::CreateLinkError(b, m.node, b.CreateString(m.reason)).Union()};
  }
  std::pair<fb::Message, Offset<void>> operator()(const Rejoined& m) {
    const auto endpoint = fb::CreateDataEndpoint(b, b.CreateString(m.data_endpoint.address), m.data_endpoint.port);
    return {fb::Message::Rejoined, fb::CreateRejoined(b, m.node, raw(b, m.data_session), endpoint).Union()};
  }
  std::pair<fb::Message, Offset<void>> operator()(const Stop& m) {
    return {fb::Message::Stop, fb::CreateStop(b, m.job_id, m.now).Union()};
  }
  std::pair<fb::Message, Offset<void>> operator()(const Hold& m) {
    return {fb::Message::Hold, fb::CreateHold(b, m.job_id, m.phase).Union()};
  }
  std::pair<fb::Message, Offset<void>> operator()(const Held& m) {
    return {fb::Message::Held, fb::CreateHeld(b, m.job_id, m.phase, m.node, m.last_begun).Union()};
  }
  std::pair<fb::Message, Offset<void>> operator()(const EndAt& m) {
    return {fb::Message::EndAt, fb::CreateEndAt(b, m.job_id, m.phase, m.end).Union()};
  }
  std::pair<fb::Message, Offset<void>> operator()(const Gather& m) {
    return {fb::Message::Gather,
            fb::CreateGather(b, m.job_id, m.phase, m.tag_base, m.step, m.own, b.CreateVector(m.replicas_of),
                             m.patience_s).Union()};
  }
};

}  // namespace

Status node_error(Code code, const std::string& node, const std::string& error) {
  return Status(code == Code::kOk ? Code::kInternal : code, fmt::format("{}: {}", node, error));
}

uint64_t schema_hash() {
  // FNV-1a over the schema texts: any change to either schema changes it.
  return fnv1a(graph::kControlSchemaText, fnv1a(graph::kPlanSchemaText));
}

namespace {

// About what a message's tensors take encoded, so that a builder of a model's
// pieces starts at its size rather than doubling (and copying) its way there.
size_t tensor_bytes(const std::vector<Tensor>& ts) {
  size_t bytes = 0;
  for (const Tensor& t : ts)
    bytes += t.values.size() * sizeof(float) + t.name.size() +
             8 * (t.shape.size() + t.offset.size() + t.piece_shape.size()) + 64;
  return bytes;
}
size_t size_hint(const Message& message) {
  if (const auto* m = std::get_if<PlanPart>(&message))
    return tensor_bytes(m->initial_values) + tensor_bytes(m->initial_state) + m->job_text.size();
  if (const auto* m = std::get_if<Done>(&message)) return tensor_bytes(m->variables);
  return 0;
}

}  // namespace

std::string encode(const Message& message) {
  FlatBufferBuilder b(size_hint(message) + 1024);
  auto [type, offset] = std::visit(Encoder{b}, message);
  b.Finish(fb::CreateEnvelope(b, type, offset), fb::EnvelopeIdentifier());
  std::string out;
  out.reserve(b.GetSize() + sizeof(uint64_t));  // the checksum appended without another copy
  out.assign(reinterpret_cast<const char*>(b.GetBufferPointer()), b.GetSize());
  const uint64_t sum = XXH3_64bits(out.data(), out.size());
  out.append(reinterpret_cast<const char*>(&sum), sizeof sum);
  return out;
}

const char* type_name(const Message& message) {
  // The variant's alternatives are the union's members in order, after NONE.
  return fb::EnumNameMessage(static_cast<fb::Message>(message.index() + 1));
}

namespace {

// Lists of checkpoint pieces as a message may carry them: FlatBuffers lets
// many entries point at one table, so a small message could decode into
// copies past any memory; a node lists at most a few per variable.
constexpr size_t kMaxPieces = size_t{1} << 16, kMaxPieceName = 4096;
Status pieces_fit(const flatbuffers::Vector<flatbuffers::Offset<fb::CheckpointPiece>>* pieces) {
  if (pieces == nullptr) return {};
  if (pieces->size() > kMaxPieces) return data_loss("control message: {} checkpoint pieces (at most {})", pieces->size(), kMaxPieces);
  for (const fb::CheckpointPiece* p : *pieces)
    if (p->tensor() != nullptr && p->tensor()->size() > kMaxPieceName)
      return data_loss("control message: a checkpoint piece's name of {} bytes (at most {})", p->tensor()->size(),
                       kMaxPieceName);
  return {};
}

}  // namespace

StatusOr<Message> decode(std::string_view message) {
  // The envelope, then the XXH3 of its bytes: a flipped bit anywhere (a
  // tensor's value included, which verification cannot see) is caught.
  if (message.size() < 16) return data_loss("control message of {} bytes is too short", message.size());
  const std::string_view bytes = message.substr(0, message.size() - sizeof(uint64_t));
  uint64_t sum = 0;
  std::memcpy(&sum, message.data() + bytes.size(), sizeof sum);
  const auto* data = reinterpret_cast<const uint8_t*>(bytes.data());
  if (!flatbuffers::BufferHasIdentifier(data, fb::EnvelopeIdentifier()))
    return data_loss("control message of {} bytes is not a Rill control envelope", message.size());
  if (XXH3_64bits(bytes.data(), bytes.size()) != sum)
    return data_loss("control message of {} bytes was corrupted on the way (checksum mismatch)", message.size());
  flatbuffers::Verifier verifier(data, bytes.size(), 64, 10'000'000);
  if (!fb::VerifyEnvelopeBuffer(verifier)) return data_loss("control message of {} bytes fails verification", bytes.size());
  const fb::Envelope* e = fb::GetEnvelope(data);
  // The schema marks the message required, and the verifier checks it; this
  // guard keeps every accessor below safe should that attribute ever go.
  if (e->message() == nullptr && e->message_type() != fb::Message::NONE)
    return data_loss("control message of {} bytes names type {} but carries no table", bytes.size(),
                     static_cast<int>(e->message_type()));
  switch (e->message_type()) {
    case fb::Message::Join: {
      auto m = e->message_as_Join();
      return Message(Join{m->rank(), str(m->version()), m->schema_hash(), str(m->address()), str(m->devices()),
                          raw(m->data_session()), str(m->machines())});
    }
    case fb::Message::JoinReply: {
      auto m = e->message_as_JoinReply();
      std::vector<comm::Endpoint> endpoints;
      if (m->data_endpoints() && m->data_endpoints()->size() > kMostDataEndpoints)
        return data_loss("a JoinReply listing {} data ports, past {}", m->data_endpoints()->size(),
                         kMostDataEndpoints);
      if (m->data_endpoints())
        for (const fb::DataEndpoint* e : *m->data_endpoints()) {
          RILL_ASSIGN_OR_RETURN(comm::Endpoint endpoint, endpoint_of(e));
          endpoints.push_back(std::move(endpoint));
        }
      return Message(JoinReply{m->ok(), str(m->error()), m->world(), raw(m->data_sessions()), std::move(endpoints)});
    }
    case fb::Message::Submit: {
      auto m = e->message_as_Submit();
      std::vector<std::string> overrides;
      if (m->overrides())
        for (const flatbuffers::String* s : *m->overrides()) overrides.push_back(s->str());
      return Message(Submit{str(m->job_text()), str(m->file_name()), m->follow(), str(m->devices()), m->steps(),
                            std::move(overrides), str(m->resume()), m->max_restarts(), m->trace(), m->min_nodes(),
                            m->replica_every(), m->replica_copies()});
    }
    case fb::Message::SubmitReply: {
      auto m = e->message_as_SubmitReply();
      return Message(SubmitReply{m->job_id(), str(m->error()), m->queued_behind()});
    }
    case fb::Message::PlanPart: {
      auto m = e->message_as_PlanPart();
      return Message(PlanPart{m->job_id(), m->phase(), m->tag_base(), str(m->job_text()), str(m->devices()), m->mode(),
                              m->steps(), m->activation_register_num(), tensors(m->initial_values()),
                              tensors(m->initial_state()), m->start_step(), m->snapshot_every(), m->trace(),
                              vec(m->members()), m->keep_steps(), m->kept_step(), vec(m->memory_parts()),
                              m->replica_every(), m->replica_copies()});
    }
    case fb::Message::CheckpointWritten: {
      auto m = e->message_as_CheckpointWritten();
      CheckpointWritten out{m->job_id(), m->phase(), m->steps_done(), m->node(), str(m->file()), m->bytes(), {},
                            str(m->error()), code_of(m->code()), m->block_seconds(), m->write_seconds()};
      RILL_RETURN_IF_ERROR(pieces_fit(m->pieces()));
      if (m->pieces())
        for (const fb::CheckpointPiece* p : *m->pieces()) {
          // A dtype this build does not know is refused here, not guessed.
          if (std::find(std::begin(kDTypes), std::end(kDTypes), static_cast<DType>(p->dtype())) == std::end(kDTypes))
            return data_loss("control message: checkpoint piece of dtype {}", p->dtype());
          out.pieces.push_back(CheckpointPiece{str(p->tensor()), vec(p->shape()), vec(p->offset()),
                                               vec(p->piece_shape()), static_cast<DType>(p->dtype())});
        }
      return Message(std::move(out));
    }
    case fb::Message::PlanAck: {
      auto m = e->message_as_PlanAck();
      PlanAck out{m->job_id(), m->phase(), m->node(), str(m->error()), code_of(m->code()), {}, m->replica_pieces()};
      RILL_RETURN_IF_ERROR(pieces_fit(m->carried()));
      if (m->carried())
        for (const fb::CheckpointPiece* p : *m->carried())
          out.carried.push_back(CheckpointPiece{str(p->tensor()), {}, vec(p->offset()), {}, DType::kF32});
      return Message(std::move(out));
    }
    case fb::Message::Start: {
      auto m = e->message_as_Start();
      return Message(Start{m->job_id(), m->phase()});
    }
    case fb::Message::Done: {
      auto m = e->message_as_Done();
      Done done{m->job_id(),  m->phase(), m->node(), str(m->error()), tensors(m->variables()), m->seconds(),
                vec(m->received_from()), vec(m->received_bytes_from()), code_of(m->code())};
      done.kept_first = m->kept_first();
      done.kept_last = m->kept_last();
      done.kept_whole = m->kept_whole();
      done.comm = str(m->comm());
      done.replica_own = vec(m->replica_own());
      if (m->replicas()) {
        if (m->replicas()->size() > kMaxPieces)
          return data_loss("control message: {} replicas held (at most {})", m->replicas()->size(), kMaxPieces);
        for (const fb::ReplicaHeld* r : *m->replicas()) done.replicas.push_back(Done::Replica{r->source(), vec(r->steps())});
      }
      if (m->traces())
        for (const fb::ActTrace* t : *m->traces())
          done.traces.push_back(
              ActTrace{t->id(), str(t->name()), t->acts_per_step(), str(t->collective()), vec(t->begin_ns()), vec(t->end_ns()), vec(t->done_ns())});
      return Message(std::move(done));
    }
    case fb::Message::Progress: {
      auto m = e->message_as_Progress();
      return Message(Progress{m->job_id(), str(m->line())});
    }
    case fb::Message::Result: {
      auto m = e->message_as_Result();
      return Message(Result{m->job_id(), str(m->result_json()), str(m->error()), code_of(m->code()), str(m->trace_json())});
    }
    case fb::Message::StatusRequest: return Message(StatusRequest{});
    case fb::Message::StatusReply: return Message(StatusReply{str(e->message_as_StatusReply()->status_json())});
    case fb::Message::Heartbeat: {
      const fb::Heartbeat* h = e->message_as_Heartbeat();
      Heartbeat beat{h->node(), h->job_id(), h->phase(), h->steps(), h->busy_seconds(), {}, vec(h->received_bytes_from())};
      if (h->threads())
        for (const fb::ThreadPace* t : *h->threads()) beat.threads.push_back({str(t->name()), t->acts(), t->busy_seconds(), t->queued()});
      if (h->link_rates())
        for (const fb::PeerRate* r : *h->link_rates()) beat.link_rates.push_back({r->peer(), r->mb_per_s()});
      beat.comm = str(h->comm());
      beat.checkpoint_bytes = h->checkpoint_bytes();
      beat.checkpoint_step = h->checkpoint_step();
      return Message(std::move(beat));
    }
    case fb::Message::Abort: {
      auto m = e->message_as_Abort();
      return Message(Abort{m->job_id(), m->phase(), str(m->reason())});
    }
    case fb::Message::Shutdown: {
      auto m = e->message_as_Shutdown();
      return Message(Shutdown{str(m->reason()), m->join_again()});
    }
    case fb::Message::Rejoined: {
      auto m = e->message_as_Rejoined();
      RILL_ASSIGN_OR_RETURN(comm::Endpoint endpoint, endpoint_of(m->data_endpoint()));
      return Message(Rejoined{m->node(), raw(m->data_session()), std::move(endpoint)});
    }
    case fb::Message::LinkError: {
      auto m = e->message_as_LinkError();
      return Message(LinkError{m->node(), str(m->reason())});
    }
    case fb::Message::Stop: {
      auto m = e->message_as_Stop();
      return Message(Stop{m->job_id(), m->now()});
    }
    case fb::Message::Hold: {
      auto m = e->message_as_Hold();
      return Message(Hold{m->job_id(), m->phase()});
    }
    case fb::Message::Held: {
      auto m = e->message_as_Held();
      return Message(Held{m->job_id(), m->phase(), m->node(), m->last_begun()});
    }
    case fb::Message::EndAt: {
      auto m = e->message_as_EndAt();
      return Message(EndAt{m->job_id(), m->phase(), m->end()});
    }
    case fb::Message::Gather: {
      auto m = e->message_as_Gather();
      return Message(Gather{m->job_id(), m->phase(), m->tag_base(), m->step(), m->own(), vec(m->replicas_of()),
                             m->patience_s()});
    }
    case fb::Message::NONE: break;
  }
  return data_loss("control message of unknown type {}", static_cast<int>(e->message_type()));
}

}  // namespace rill::control

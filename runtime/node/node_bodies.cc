// What each task of the node does (its actor's body, made from the plan),
// and its variables' start (initial values, restored state, snapshots) and
// end (the values reported back); the carried state of its compressed
// all-reduces, restored and snapshot as the variables are.
#include "runtime/node/node_run.h"
#include "runtime/node/step_keeper.h"

#include <algorithm>
#include <chrono>

#include <spdlog/spdlog.h>

#include "kernels/cuda_kernels.h"
#include "kernels/data/dataset_peek.h"
#include "runtime/node/index_check.h"
#include "runtime/node/plan_reader.h"

namespace rill {

PieceOf piece_of_variable(const plan::Task& task, const plan::RegstDesc& model) {
  PieceOf p{read_string(model.name()), read_shape(model.logical_shape()), read_shape(task.variable()->offset())};
  const plan::VariableConf& conf = *task.variable();
  if (conf.whole() != nullptr && conf.whole_shape() != nullptr && conf.whole_offset() != nullptr &&
      conf.whole_offset()->size() == p.offset.size() && conf.whole_shape()->size() == p.offset.size()) {
    p.name = conf.whole()->str();
    p.logical = read_shape(conf.whole_shape());
    for (size_t a = 0; a < p.offset.size(); ++a) p.offset[a] += conf.whole_offset()->Get(static_cast<flatbuffers::uoffset_t>(a));
  }
  return p;
}

StatusOr<std::shared_ptr<const Dataset>> NodeRun::dataset(int index) {
  if (!plan_->datasets() || index < 0 || index >= static_cast<int>(plan_->datasets()->size()))
    return invalid_argument("plan: dataset index {} out of range", index);
  datasets_.resize(plan_->datasets()->size());
  if (!datasets_[index]) {
    RILL_ASSIGN_OR_RETURN(auto opened, Dataset::open(read_dataset(*plan_->datasets()->Get(index)), options_.data_access));
    datasets_[index] = std::move(opened);
  }
  return datasets_[index];
}

StatusOr<Body> NodeRun::make_body(const plan::Task& task) {
  std::string name = read_string(task.name());
  switch (task.kind()) {
    case plan::TaskKind::Compute: {
      const OpDef* def = find_op(read_string(task.op_type()));
      if (!def || !def->cpu) return invalid_argument("task '{}': no CPU kernel for op '{}'", name, read_string(task.op_type()));
      std::vector<Shape> logical;
      if (task.logical_input_shapes())
        for (const plan::Shape* s : *task.logical_input_shapes()) logical.push_back(read_shape(s->dims()));
      std::vector<Shape> offsets;
      if (task.input_offsets())
        for (const plan::Shape* s : *task.input_offsets()) offsets.push_back(read_shape(s->dims()));
      KernelFn kernel = nullptr;  // the op's CPU kernel
      CudaContext* cuda = nullptr;
      if (ActorId::device_type(task.id()) == DeviceType::kCuda) {
        kernel = find_cuda_kernel(def->type);
        if (!kernel) return invalid_argument("task '{}': no CUDA kernel for op '{}'", name, def->type);
        RILL_ASSIGN_OR_RETURN(cuda, cuda_for(ActorId::device(task.id())));
      }
      Attrs attrs = read_attrs(task.attrs());
      auto params = parse_params(*def, attrs);
      if (!params.ok()) return params.status().with_context(fmt::format("task '{}'", name));
      std::span<std::byte> scratch;  // as large as the task needs: check_memory_plan holds it
      if (auto at = compute_memory_.find(task.id()); at != compute_memory_.end()) scratch = at->second;
      return Body(std::in_place_type<ComputeBody>, def, std::move(attrs), std::move(*params), std::move(logical),
                  scratch, kernel, cuda, std::move(offsets), plan_->cuda_graphs());
    }
    case plan::TaskKind::Source: {
      const plan::SourceConf* conf = task.source();
      if (!conf) return invalid_argument("task '{}': source without its conf", name);
      RILL_ASSIGN_OR_RETURN(auto data, dataset(conf->dataset()));
      std::vector<int> fields;
      if (conf->fields())
        for (const flatbuffers::String* f : *conf->fields()) {
          RILL_ASSIGN_OR_RETURN(int index, data->field_index(f->str()));
          fields.push_back(index);
        }
      // What the data holds per sample must be what the job declared: a
      // sample of another size would be copied past its slot, or shift the
      // rows after it.
      if (fields.size() != task.outputs()->size())
        return invalid_argument("task '{}': {} fields for {} outputs", name, fields.size(), task.outputs()->size());
      for (size_t f = 0; f < fields.size(); ++f) {
        const plan::RegstDesc* out = regst(task.outputs()->Get(static_cast<flatbuffers::uoffset_t>(f)));
        const Shape slot = read_shape(out->shape());
        const Shape declared(slot.begin() + (slot.empty() ? 0 : 1), slot.end());  // the rows axis off
        const TensorMeta& held = data->field_meta(fields[static_cast<size_t>(f)]);
        const TensorMeta wanted{declared, read_dtype(out->dtype())};
        if (!data_agrees(wanted, held))
          return data_mismatch(read_string(out->name()), conf->fields()->Get(static_cast<flatbuffers::uoffset_t>(f))->str(),
                               read_dataset(*plan_->datasets()->Get(conf->dataset())), wanted, held);
      }
      // Indices (token ids, labels) must lie where the ops reading them
      // look: a value outside would be a wrong lookup or an error mid-run.
      std::vector<std::string> inputs;
      for (size_t f = 0; f < fields.size(); ++f)
        inputs.push_back(read_string(regst(task.outputs()->Get(static_cast<flatbuffers::uoffset_t>(f)))->name()));
      RILL_RETURN_IF_ERROR(check_source_indices(*conf, *data, read_dataset(*plan_->datasets()->Get(conf->dataset())),
                                                fields, inputs, &checked_bounds_));
      BatchSampler sampler(data->num_samples(), conf->global_batch(), conf->shard(), conf->num_shards(),
                           conf->shuffle(), conf->seed(), conf->sub_shard(), conf->num_sub_shards(),
                           plan_->micro_batches(), conf->rows_by_rank());
      RILL_RETURN_IF_ERROR(sampler.validate().with_context(fmt::format("dataset '{}'", data->name())));
      return Body(std::in_place_type<SourceBody>, std::move(data), std::move(fields), std::move(sampler));
    }
    case plan::TaskKind::Variable: {
      const plan::VariableConf* conf = task.variable();
      if (!conf || !task.outputs() || task.outputs()->size() != static_cast<flatbuffers::uoffset_t>(std::max(1, conf->lanes())))
        return invalid_argument("task '{}': variable without its conf or model regst (one per lane)", name);
      const plan::RegstDesc* model = regst(task.outputs()->Get(0));
      const OpDef* init = find_op(read_string(conf->init_op()));
      if (!init || init->role != OpRole::kInitializer)
        return invalid_argument("task '{}': unknown initializer '{}'", name, read_string(conf->init_op()));
      const OpDef* update = nullptr;
      if (!read_string(conf->update_op()).empty()) {
        update = find_op(read_string(conf->update_op()));
        if (!update || update->role != OpRole::kUpdate)
          return invalid_argument("task '{}': unknown optimizer update '{}'", name, read_string(conf->update_op()));
      }
      OpParams update_params;
      if (update) {
        auto parsed = parse_params(*update, read_attrs(conf->update_attrs()));
        if (!parsed.ok()) return parsed.status().with_context(fmt::format("task '{}'", name));
        update_params = std::move(*parsed);
      }
      PieceOf of = piece_of_variable(task, *model);
      // A laned variable's inputs are one gradient per lane; a plain one's
      // the gradient and, under loss scaling, the gate.
      std::vector<TensorMeta> update_inputs;
      const int update_reads = conf->lanes() > 1 ? 1 : (task.inputs() ? static_cast<int>(task.inputs()->size()) : 0);
      for (int i = 0; update && i < update_reads; ++i) {
        const plan::RegstDesc* in = regst(task.inputs()->Get(static_cast<flatbuffers::uoffset_t>(i)));
        if (in == nullptr) return invalid_argument("task '{}': its input {} is no regst of the plan", name, i);
        update_inputs.push_back(TensorMeta{read_shape(in->shape()), read_dtype(in->dtype())});
      }
      if (update && (update_inputs.empty() || update_inputs.size() > 2))
        return invalid_argument("task '{}': an update reads the gradient and at most a gate, not {} inputs", name,
                                update_inputs.size());
      VariableBody variable(init, read_attrs(conf->init_attrs()), std::move(of.logical), std::move(of.offset), update,
                            std::move(update_params),
                            TensorMeta{read_shape(model->shape()), read_dtype(model->dtype())},
                            std::move(update_inputs));
      if (update && update->num_state > 0) {
        auto state = state_memory_.find(task.id());
        if (state == state_memory_.end())
          return internal_error("task '{}': the memory plan gave its optimizer state no place", name);
        RILL_RETURN_IF_ERROR(variable.place_state(state->second).with_context(fmt::format("task '{}'", name)));
      }
      const int lanes = conf->lanes();
      if (lanes > 1) {
        // One gradient and one model regst per lane (an async pserver's block).
        if (static_cast<int>(task.inputs()->size()) != lanes || static_cast<int>(task.outputs()->size()) != lanes ||
            ActorId::device_type(task.id()) == DeviceType::kCuda || !(conf->dc_asgd_lambda() >= 0))
          return invalid_argument("task '{}': a variable of {} lanes needs as many gradients and models in host "
                                  "memory (has {} and {}), and a DC-ASGD lambda >= 0",
                                  name, lanes, task.inputs() ? task.inputs()->size() : 0, task.outputs()->size());
        return Body(std::in_place_type<LanedVariableBody>, std::move(variable), lanes, conf->dc_asgd_lambda());
      }
      if (ActorId::device_type(task.id()) == DeviceType::kCuda) {
        RILL_ASSIGN_OR_RETURN(CudaContext * cuda, cuda_for(ActorId::device(task.id())));
        KernelFn update_kernel = update ? find_cuda_kernel(update->type) : nullptr;
        RILL_RETURN_IF_ERROR(variable.use_device(cuda, update_kernel).with_context(fmt::format("task '{}'", name)));
      }
      return Body(std::in_place_type<VariableBody>, std::move(variable));
    }
    case plan::TaskKind::Boxing:
    {
      auto scratch = boxing_memory_.find(task.id());
      return boxing_.body(*plan_, task, scratch == boxing_memory_.end() ? nullptr : scratch->second,
                          [this](uint32_t device) { return cuda_for(device); });
    }
    case plan::TaskKind::Sink: {
      const plan::SinkConf* conf = task.sink();
      std::vector<std::string> names;
      std::vector<bool> partial;
      if (conf && conf->names())
        for (const flatbuffers::String* n : *conf->names()) names.push_back(n->str());
      if (conf && conf->partial())
        for (uint8_t p : *conf->partial()) partial.push_back(p != 0);
      std::vector<std::string> fetch;
      if (conf && conf->fetch())
        for (const flatbuffers::String* f : *conf->fetch()) fetch.push_back(f->str());
      if (names.size() != partial.size() || !task.inputs() || names.size() + fetch.size() != task.inputs()->size())
        return invalid_argument("task '{}': sink names, partial flags, fetched tensors and inputs disagree", name);
      const int ranks = conf ? conf->ranks() : 0;
      if (ranks < 0 || static_cast<size_t>(ranks) > task.inputs()->size())
        return invalid_argument("task '{}': sink ranks {} outside [0, {}] (its inputs)", name, ranks,
                                task.inputs()->size());
      return Body(std::in_place_type<SinkBody>, std::move(names), std::move(partial), options_.on_step,
                  std::move(fetch), task.acts_per_step(), ranks);
    }
    case plan::TaskKind::Send:
    case plan::TaskKind::Recv:
      if (task.inputs()->size() != 1 || task.outputs()->size() != 1)
        return invalid_argument("task '{}': send/recv needs one input and one output", name);
      return Body(std::in_place_type<CopyBody>);
    case plan::TaskKind::Copy: {
      if (task.inputs()->size() != 1 || task.outputs()->size() != 1)
        return invalid_argument("task '{}': copy needs one input and one output", name);
      // Its zones: host memory (-1) or a GPU of the node; it runs on the GPU
      // it writes to (from another GPU or the host), else on the one it reads.
      const int from = regst(task.inputs()->Get(0))->device(), to = regst(task.outputs()->Get(0))->device();
      const int device = static_cast<int>(ActorId::device(task.id()));
      if (from == to || (to >= 0 && to != device) || (to < 0 && from != device))
        return invalid_argument("task '{}': a copy from zone {} to zone {} on cuda:{}", name, from, to, device);
      RILL_ASSIGN_OR_RETURN(CudaContext * cuda, cuda_for(static_cast<uint32_t>(device)));
      if (from >= 0 && to >= 0) {
        RILL_RETURN_IF_ERROR(cuda_for(static_cast<uint32_t>(from)).status());  // the peer's context, made once
        return Body(std::in_place_type<CopyBody>, cuda, CopyKind::kDeviceToDevice, "task '" + name + "'", from);
      }
      return Body(std::in_place_type<CopyBody>, cuda, from >= 0 ? CopyKind::kDeviceToHost : CopyKind::kHostToDevice,
                  "task '" + name + "'");
    }
  }
  return invalid_argument("task '{}': unknown task kind", name);
}

namespace {

// `f` of a variable's body, laned or not.
template <typename F>
auto with_variable(Body& body, F&& f) {
  if (auto* laned = std::get_if<LanedVariableBody>(&body)) return f(*laned);
  return f(std::get<VariableBody>(body));
}

}  // namespace

Status NodeRun::init_variable(const plan::Task& task, Actor& actor) {
  return with_variable(actor.body(), [&](auto& body) { return init_variable(task, body); });
}

template <typename VariableLike>
Status NodeRun::init_variable(const plan::Task& task, VariableLike& body) {
  const plan::RegstDesc* model = regst(task.outputs()->Get(0));
  const TensorView& slot = slots_[model->id()][0];
  const PieceOf origin = piece_of_variable(task, *model);
  const std::string& var = origin.name;
  const Shape& logical = origin.logical;
  const Shape& offset = origin.offset;
  // This piece of a logical tensor given by the caller, or empty if not given.
  auto piece_of = [&](const std::map<std::string, std::vector<float>>& values,
                      const std::string& name) -> StatusOr<std::vector<float>> {
    auto it = values.find(name);
    if (it == values.end()) return std::vector<float>{};
    if (static_cast<int64_t>(it->second.size()) != num_elements(logical))
      return invalid_argument("initial values of '{}' hold {} elements, its shape {} needs {}", name,
                              it->second.size(), shape_string(logical), num_elements(logical));
    std::vector<float> piece(static_cast<size_t>(slot.size()));
    copy_block(logical, offset, slot.shape, const_cast<float*>(it->second.data()), piece.data(), true);
    return piece;
  };
  // Or this node's own piece, as it kept it (a run going on from its memory).
  std::vector<float> kept_model;
  std::vector<std::vector<float>> kept_state;
  const bool from_kept = options_.start_from_kept >= 0 && options_.keeper != nullptr;
  if (from_kept)
    RILL_RETURN_IF_ERROR(options_.keeper->piece_at(options_.keeper_job, options_.start_from_kept, var, offset,
                                                   slot.shape, &kept_model, &kept_state));
  std::vector<float> values = std::move(kept_model);
  if (!from_kept) {
    RILL_ASSIGN_OR_RETURN(values, piece_of(options_.initial_values, var));
  }
  RILL_RETURN_IF_ERROR(body.init(slot, values));
  const OpDef* update = find_op(read_string(task.variable()->update_op()));
  std::vector<std::string> state_names;
  for (int i = 0; update && i < update->num_state; ++i) {
    state_names.push_back(update->state_names[i] ? update->state_names[i] : fmt::format("state{}", i));
    std::vector<float> state;
    if (from_kept && static_cast<size_t>(i) >= kept_state.size())
      return Status(Code::kFailedPrecondition, fmt::format("variable '{}' was kept with {} optimizer state(s), its "
                                                           "update has {}",
                                                           var, kept_state.size(), update->num_state));
    if (from_kept) {
      state = std::move(kept_state[static_cast<size_t>(i)]);
    } else {
      RILL_ASSIGN_OR_RETURN(state, piece_of(options_.initial_state, var + "/" + state_names.back()));
    }
    if (!state.empty()) RILL_RETURN_IF_ERROR(body.load_state(i, state));
  }
  // A broadcast variable's replicas are one piece: the lowest rank holding
  // it reports it at the end (the compiler marks the others).
  const size_t piece_bytes = static_cast<size_t>(slot.size()) * sizeof(float);
  if (!task.variable()->replica()) variable_bytes_ += piece_bytes;
  // One holder of each distinct piece writes it into checkpoints, the
  // holders taking turns by bytes (compiler/checkpoint_writers.h).
  // The piece as a copy at a step boundary, for `to` (a checkpoint, a replica).
  auto tell = [var, logical, offset, shape = slot.shape, state_names](
                  const std::function<void(int64_t, VariablePiece)>& to) {
    return [&to, var, logical, offset, shape, state_names](int64_t done, std::span<const float> model,
                                                          std::span<const std::span<const float>> state) {
      const auto start = std::chrono::steady_clock::now();
      VariablePiece piece{var, logical, offset, shape, std::vector<float>(model.begin(), model.end()), {}};
      for (size_t i = 0; i < state.size(); ++i)
        piece.state.emplace_back(state_names[i], std::vector<float>(state[i].begin(), state[i].end()));
      piece.copy_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      to(done, std::move(piece));
    };
  };
  if (options_.on_snapshot && task.variable()->checkpoint_writer())
    body.on_snapshot(tell(options_.on_snapshot), options_.snapshot_every, end_.get());
  if (options_.on_replica && options_.replica_every > 0 && task.variable()->checkpoint_writer())
    body.on_replica(tell(options_.on_replica), options_.replica_every, end_.get());
  if (options_.keeper)
    if (const int piece = options_.keeper->declare(var, logical, offset, slot.shape, state_names, update != nullptr);
        piece >= 0)
      RILL_RETURN_IF_ERROR(body.on_every_step(
          [keeper = options_.keeper, piece](int64_t done, std::span<const float> model,
                                            std::span<const std::span<const float>> state) {
            keeper->keep(piece, done, model, state);
          },
          slot, options_.start_step));
  return {};
}

Status NodeRun::init_boxing(const plan::Task& task, Actor& actor) {
  auto* body = std::get_if<BoxingBody>(&actor.body());
  if (body == nullptr) return {};
  RILL_ASSIGN_OR_RETURN(std::vector<CarriedPiece> pieces, carried_pieces(*plan_, task));
  if (pieces.empty()) return {};
  if (const std::string left = restore_carried(*body, pieces, options_.initial_state, options_.start_step);
      !left.empty())
    spdlog::warn("node {}: {}: the compression's carried error starts from zero: {}", options_.node,
                 read_string(task.name()), left);
  if (options_.keeper) {
    // A live job's memory (step_keeper.h): what it carries from the step
    // the run starts at on, so that the run after a lost node goes on with it.
    auto keep = [keeper = options_.keeper, pieces](int64_t done, const BoxingBody::Carried& carried) {
      for (const CarriedPiece& piece : pieces) keeper->keep_carried(piece.name, done, piece.q ? carried.q : carried.error);
    };
    keep(options_.start_step, body->carried());
    body->on_every_step(std::move(keep));
  }
  if (!options_.on_snapshot) return {};
  body->on_snapshot([this, pieces](int64_t done, const BoxingBody::Carried& carried) {
    snapshot_carried(pieces, done, carried);
  }, options_.snapshot_every);
  carried_.emplace_back(body, std::move(pieces));
  return {};
}

void NodeRun::snapshot_carried(const std::vector<CarriedPiece>& pieces, int64_t steps_done,
                               const BoxingBody::Carried& carried) {
  for (const CarriedPiece& piece : pieces)
    if (piece.writes)
      options_.on_snapshot(steps_done, VariablePiece{piece.name, piece.logical, piece.offset, piece.shape,
                                                     carried_values(piece, carried), {}});
}

StatusOr<std::vector<SnapshotPiece>> snapshot_pieces(std::string_view node_plan) {
  RILL_ASSIGN_OR_RETURN(const plan::Plan* plan, compiler::verify_plan(node_plan));
  std::map<int64_t, const plan::RegstDesc*> regsts;
  for (const plan::RegstDesc* r : *plan->regsts()) regsts[r->id()] = r;
  std::vector<SnapshotPiece> out;
  for (const plan::Task* task : *plan->tasks()) {
    if (task->kind() == plan::TaskKind::Boxing && (plan->node() < 0 || task->node() == plan->node())) {
      RILL_ASSIGN_OR_RETURN(std::vector<CarriedPiece> carried, carried_pieces(*plan, *task));
      for (CarriedPiece& piece : carried)
        if (piece.writes) out.push_back({std::move(piece.name), std::move(piece.offset)});
      continue;
    }
    // A node's plan also numbers other nodes' variable tasks that read
    // across placements; only its own run here.
    if (task->kind() != plan::TaskKind::Variable || !task->variable() || !task->variable()->checkpoint_writer() ||
        !task->outputs() || task->outputs()->size() == 0 || (plan->node() >= 0 && task->node() != plan->node()))
      continue;
    auto model = regsts.find(task->outputs()->Get(0));
    if (model == regsts.end()) return data_loss("plan: variable task {} has no model regst", task->id());
    PieceOf piece = piece_of_variable(*task, *model->second);
    out.push_back({std::move(piece.name), std::move(piece.offset)});
  }
  return out;
}

void NodeRun::collect_variables(RunReport& report) {
  for (const plan::Task* task : variable_tasks_) {
    const plan::RegstDesc* model = regst(task->outputs()->Get(0));
    auto [var, logical, offset] = piece_of_variable(*task, *model);
    VariableValue& value = report.variables[var];
    const TensorView& slot = slots_[model->id()][0];
    std::vector<float> host;
    Status read = with_variable(by_index_[ActorId::index(task->id())]->body(),
                                [&](auto& body) { return body.read_model(slot, &host); });
    if (!read.ok()) {
      report.status = read.with_context(fmt::format("reading variable '{}'", var));
      return;
    }
    place_piece(logical, offset, slot.shape, host, &value.shape, &value.values);
    // A broadcast variable's replicas are one piece, reported by the lowest
    // rank that holds it (the master has it already, or another node sends it).
    if (!task->variable()->replica())
      report.pieces.push_back(VariablePiece{var, logical, offset, slot.shape, std::move(host)});
  }
}

}  // namespace rill

#include "atrex/agent/worker.h"

#include <thread>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "atrex/common/heartbeat.h"
#include "atrex/common/metrics.h"

namespace atrex::agent {

QueueEvalFn::QueueEvalFn(TaskQueue& queue, ResultStore& results, QueueEvalOptions options)
    : queue_(queue), results_(results), options_(std::move(options)) {}

namespace {

EvalRecord missing_record(const EvalTask& task, const std::string& shape, EvalStatus status,
                          std::string error) {
  EvalRecord r = new_eval_record(task, shape);
  r.status = status;
  r.error = std::move(error);
  return r;
}

// What the generation that went from `before` to `after` spent, into the model usage counters.
void count_model_usage(metrics::AgentMetrics& m, const std::string& agent, const TokenUsage& before,
                       const TokenUsage& after) {
  if (after.requests <= before.requests) return;
  m.model_tokens.Add({{"agent", agent}, {"kind", "prompt"}})
      .Increment(static_cast<double>(after.prompt_tokens - before.prompt_tokens));
  m.model_tokens.Add({{"agent", agent}, {"kind", "completion"}})
      .Increment(static_cast<double>(after.completion_tokens - before.completion_tokens));
  m.model_cost_usd.Add({{"agent", agent}}).Increment(after.cost_usd - before.cost_usd);
  m.model_requests.Add({{"agent", agent}})
      .Increment(static_cast<double>(after.requests - before.requests));
}

}  // namespace

Result<std::optional<EvalRecord>> QueueEvalFn::stored(const EvalTask& task,
                                                      const std::string& shape,
                                                      std::chrono::milliseconds wait) const {
  const std::string key = record_key(task.task_id, shape);
  ATREX_ASSIGN_OR_RETURN(std::optional<Json> j, results_.wait(key, wait));
  if (!j) return std::optional<EvalRecord>{};
  ATREX_ASSIGN_OR_RETURN(EvalRecord r, eval_record_from_json(*j, "result " + key));
  return std::optional<EvalRecord>{std::move(r)};
}

Result<bool> QueueEvalFn::all_stored(const EvalTask& task) const {
  for (const auto& shape : task.shape_ids) {
    ATREX_ASSIGN_OR_RETURN(std::optional<Json> j, results_.get(record_key(task.task_id, shape)));
    if (!j) return false;
  }
  return true;
}

Result<std::optional<DeadLetter>> QueueEvalFn::dead_letter_of(const EvalTask& task) const {
  ATREX_ASSIGN_OR_RETURN(auto dead, queue_.dead_letters(options_.stream));
  for (auto& d : dead) {
    // A dead letter's body may be anything (that may be why it died): no strict read here.
    if (d.body.is_object() && d.body.contains("task_id") && d.body["task_id"] == task.task_id) {
      return std::optional<DeadLetter>{std::move(d)};
    }
  }
  return std::optional<DeadLetter>{};
}

Result<std::string> QueueEvalFn::recover_if_lost(const EvalTask& task,
                                                 std::string message_id) const {
  ATREX_ASSIGN_OR_RETURN(MessageState st, queue_.state(options_.stream, message_id));
  if (st == MessageState::kQueued) return message_id;
  // Gone is also how a finished task looks: its runner stores every record before it acks,
  // so records read after the state are complete when it finished.
  ATREX_ASSIGN_OR_RETURN(bool done, all_stored(task));
  if (done) return message_id;
  ATREX_ASSIGN_OR_RETURN(auto dead, dead_letter_of(task));
  if (dead) return message_id;
  ATREX_ASSIGN_OR_RETURN(std::string again,
                         queue_.requeue_lost(options_.stream, message_id, to_json(task)));
  spdlog::warn("evaluation task {} ({}) was lost from queue {} ({}): put back as {}", task.task_id,
               task.operator_name, options_.stream, message_state_name(st), again);
  if (options_.metrics) options_.metrics->eval_tasks_lost.Increment();
  return again;
}

Result<std::vector<EvalRecord>> QueueEvalFn::operator()(const EvalTask& task) const {
  // A resumed sweep finds every record already stored: nothing is evaluated twice.
  std::vector<EvalRecord> out;
  for (const auto& shape : task.shape_ids) {
    ATREX_ASSIGN_OR_RETURN(auto r, stored(task, shape, std::chrono::milliseconds(0)));
    if (!r) break;
    out.push_back(std::move(*r));
  }
  if (out.size() == task.shape_ids.size()) return out;
  out.clear();
  ATREX_ASSIGN_OR_RETURN(std::string message_id, queue_.enqueue(options_.stream, to_json(task)));
  const double budget_s =
      task.settings.compile_timeout_s +
      static_cast<double>(task.shape_ids.size()) * task.settings.shape_timeout_s;
  const auto deadline =
      std::chrono::steady_clock::now() +
      std::chrono::seconds(static_cast<int64_t>(budget_s * options_.max_deliveries + 300));
  auto next_loss_check = std::chrono::steady_clock::now() + options_.loss_check_every;
  for (const auto& shape : task.shape_ids) {
    for (;;) {
      ATREX_ASSIGN_OR_RETURN(auto r, stored(task, shape, std::chrono::milliseconds(1000)));
      if (r) {
        out.push_back(std::move(*r));
        break;
      }
      if (options_.stop && options_.stop->load())
        return make_error(ErrorCode::kUnavailable, "interrupted while waiting for an evaluation");
      // Fail fast when the task was dead-lettered (its runners kept dying).
      ATREX_ASSIGN_OR_RETURN(auto dead, dead_letter_of(task));
      if (dead) {
        out.push_back(
            missing_record(task, shape, EvalStatus::kCrashed,
                           fmt::format("evaluation task dead-lettered after {} deliveries: {}",
                                       dead->delivery_count, dead->last_error)));
        break;
      }
      const auto now = std::chrono::steady_clock::now();
      if (now >= next_loss_check) {
        next_loss_check = now + options_.loss_check_every;
        ATREX_ASSIGN_OR_RETURN(message_id, recover_if_lost(task, std::move(message_id)));
      }
      if (now > deadline) {
        out.push_back(missing_record(task, shape, EvalStatus::kTimeout,
                                     "no evaluation record arrived in time"));
        break;
      }
    }
  }
  return out;
}

AgentWorker::AgentWorker(TaskQueue& queue, ResultStore& results, const ProviderRegistry& providers,
                         AgentWorkerOptions options)
    : queue_(queue), results_(results), providers_(providers), options_(std::move(options)) {}

Result<void> AgentWorker::put_final(const FinalMarker& marker) {
  // First write wins: a marker another delivery of the same task wrote already stands.
  ATREX_ASSIGN_OR_RETURN(bool written,
                         results_.put(final_key(marker.agent, marker.op), to_json(marker)));
  if (!written) spdlog::info("[{} {}] final marker already stored", marker.agent, marker.op);
  return ok();
}

Result<AuditTrail*> AgentWorker::audit_for(const AgentTask& task) {
  std::lock_guard lock(mu_);
  const std::string key = task.agent.name + "/" + task.op;
  auto it = audits_.find(key);
  if (it != audits_.end()) return it->second.get();
  ATREX_ASSIGN_OR_RETURN(
      auto trail, AuditTrail::open(options_.audit_dir / task.agent.name / (task.op + ".jsonl")));
  return (audits_[key] = std::move(trail)).get();
}

Result<void> AgentWorker::handle(const AgentTask& queued, const std::atomic<bool>* stop) {
  ATREX_ASSIGN_OR_RETURN(AuditTrail * audit, audit_for(queued));
  ATREX_TRY(audit->refresh());  // other workers and sub-agents append to it
  // A redelivered task (its worker died) continues from the trail, not from where it started:
  // iterations already spent stay spent and the best kernel found is kept.
  AgentTask task = queued;
  const auto progress = audit->progress();
  task.iterations_used = std::max(task.iterations_used, progress.iterations_used);
  if (progress.best.score > task.best.score) task.best = progress.best;
  if (progress.usage.requests >= task.usage.requests) task.usage = progress.usage;
  metrics::AgentMetrics* m = options_.metrics;
  QueueEvalOptions eo;
  eo.max_deliveries = options_.max_deliveries;
  eo.stop = stop;
  eo.metrics = options_.metrics;
  QueueEvalFn eval(queue_, results_, eo);
  bool closes_pair = false;
  auto sub = progress.subagents.find(task.subagent);
  if (sub != progress.subagents.end() && sub->second.generation > task.generation) {
    // This sub-agent's dropout already queued the next generation (the worker died between
    // queueing it and acking this one): that task carries on.
    spdlog::info("[{} {}] sub-agent {} generation {} is stale (the trail is at generation {})",
                 task.agent.name, task.op, task.subagent, task.generation, sub->second.generation);
    return ok();
  }
  if (sub != progress.subagents.end() && sub->second.ended) {
    // Its chain ended before its worker died; the final evaluation is due when every
    // sub-agent has ended (it may have died running it: this redelivery runs it again, and
    // its deterministic task id finds the records already stored).
    int ended = 0;
    for (const auto& [s, p] : progress.subagents)
      ended += s < task.agent.parallel_generations && p.ended;
    if (ended < task.agent.parallel_generations) return ok();
    closes_pair = true;
  } else {
    ATREX_ASSIGN_OR_RETURN(const ProviderFactory* factory, providers_.require(task.agent.provider));
    ATREX_ASSIGN_OR_RETURN(std::unique_ptr<Provider> provider, factory->make(task.agent));
    // Every evaluation a generation asks for is the quick evaluation of a newly proposed
    // candidate.
    const EvalFn quick = [&](const EvalTask& t) {
      if (m) m->candidates.Add({{"agent", task.agent.name}}).Increment();
      return eval(t);
    };
    GenerationOptions go;
    go.shared_best = options_.shared_best;
    go.worker = options_.consumer;
    // The gauge follows each improvement as its quick evaluation's records arrive, so the
    // dashboard shows an (agent, operator) converging, not only where a generation ended. It is
    // made at the first correct candidate (absent before: a 0 would read as a score).
    if (m) {
      go.on_best = [m, &task](double score) {
        auto& best = m->best_score.Add({{"agent", task.agent.name}, {"operator", task.op}});
        if (score > best.Value()) best.Set(score);
      };
    }
    ATREX_ASSIGN_OR_RETURN(GenerationResult gen,
                           run_generation(task, *provider, quick, *audit, go));
    // No correct candidate yet: the gauge stays absent (a -1 would read as a score).
    if (m) {
      if (gen.next.best.score >= 0) {
        m->best_score.Add({{"agent", task.agent.name}, {"operator", task.op}})
            .Set(gen.next.best.score);
      }
      count_model_usage(*m, task.agent.name, task.usage, gen.next.usage);
      m->generations.Add({{"agent", task.agent.name}, {"reason", generation_end_name(gen.end)}})
          .Increment();
      if (gen.shared_best_wins > 0) {
        m->shared_best_updates.Add({{"agent", task.agent.name}})
            .Increment(static_cast<double>(gen.shared_best_wins));
      }
    }
    if (gen.end == GenerationEnd::kDropout) {
      spdlog::info(
          "[{} {}] dropout after sub-agent {} generation {} ({}): a fresh sub-agent continues "
          "from S = {:.4f}",
          task.agent.name, task.op, task.subagent, task.generation, gen.direction.id,
          gen.next.best.score);
      ATREX_TRY(queue_.enqueue(kAgentStream, to_json(gen.next)));
      if (m) m->tasks.Add({{"agent", task.agent.name}, {"status", "dropout"}}).Increment();
      return ok();
    }
    spdlog::info("[{} {}] sub-agent {} ended at generation {}: {}", task.agent.name, task.op,
                 task.subagent, task.generation, generation_end_name(gen.end));
    task = gen.next;
    closes_pair = gen.closes_pair;
  }
  if (!closes_pair) return ok();  // another sub-agent is still exploring; the last one closes
  return finish_pair(task, *audit, eval);
}

Result<void> AgentWorker::finish_pair(AgentTask task, AuditTrail& audit, const EvalFn& eval) {
  metrics::AgentMetrics* m = options_.metrics;
  ATREX_TRY(audit.refresh());
  const auto progress = audit.progress();
  // The best over every sub-agent: the trail's (all their evaluations) and the shared store's.
  if (progress.best.score > task.best.score) task.best = progress.best;
  if (options_.shared_best) {
    ATREX_ASSIGN_OR_RETURN(auto shared, options_.shared_best->get(pair_key(task)));
    if (shared && shared->score > task.best.score) task.best = std::move(*shared);
  }
  if (progress.usage.requests >= task.usage.requests) task.usage = progress.usage;
  task.iterations_used = std::max(task.iterations_used, progress.iterations_used);
  int generations = 0;
  for (const auto& [s, p] : progress.subagents) generations += p.generation + 1;
  FinalMarker marker;
  marker.agent = task.agent.name;
  marker.op = task.op;
  marker.generations = std::max(generations, task.generation + 1);
  marker.iterations_used = task.iterations_used;
  marker.quick_score = task.best.score;
  marker.provenance = task.best.provenance;
  marker.shapes = task.full_shapes;
  marker.usage = task.usage;
  auto final_records = run_final_evaluation(task, eval, audit);
  if (final_records && !final_records->empty()) {
    marker.status = FinalStatus::kEvaluated;
    marker.task_id = final_records->front().task_id;
  } else if (final_records && final_records->empty()) {
    marker.status = FinalStatus::kError;
    marker.error = "the final evaluation produced no records (no shapes)";
  } else if (final_records.error().code == ErrorCode::kNotFound) {
    marker.status = FinalStatus::kNoCorrectCandidate;
    marker.error = final_records.error().message;
  } else {
    return tl::unexpected(final_records.error());
  }
  ATREX_TRY(put_final(marker));
  if (m) m->tasks.Add({{"agent", task.agent.name}, {"status", "done"}}).Increment();
  return ok();
}

Result<bool> AgentWorker::run_once(const std::atomic<bool>* stop) {
  ATREX_ASSIGN_OR_RETURN(auto leases,
                         queue_.claim(kAgentStream, options_.consumer, 1, options_.poll_block));
  if (leases.empty()) return false;
  const Lease& lease = leases.front();
  auto task = agent_task_from_json(lease.body, "agent task " + lease.message_id);
  auto count = [&](const std::string& agent, const char* status) {
    if (options_.metrics)
      options_.metrics->tasks.Add({{"agent", agent}, {"status", status}}).Increment();
  };
  // A failed release or ack is logged, not returned: the lease then expires and the task is
  // delivered again (at-least-once), which the first-write-wins results make harmless.
  auto release = [&](const std::string& why) {
    if (auto r = queue_.release(lease, why); !r) {
      spdlog::warn("agent worker {}: giving task {} back: {}", options_.consumer, lease.message_id,
                   r.error().message);
    }
  };
  auto ack = [&] {
    if (auto r = queue_.ack(lease); !r) {
      spdlog::warn("agent worker {}: acking task {}: {}", options_.consumer, lease.message_id,
                   r.error().message);
    }
  };
  if (!task) {
    release(task.error().message);
    count("", "released");
    return tl::unexpected(task.error());
  }
  Result<void> handled;
  {
    LeaseHeartbeat heartbeat(queue_, lease, options_.heartbeat);
    handled = handle(*task, stop);
  }
  if (!handled) {
    const ErrorCode code = handled.error().code;
    if (code == ErrorCode::kNotFound || code == ErrorCode::kInvalidInput) {
      // Retrying cannot help (no templates for this operator, a bad template folder): the
      // (agent, operator) ends here and the sweep reports why.
      FinalMarker marker;
      marker.agent = task->agent.name;
      marker.op = task->op;
      marker.status = FinalStatus::kError;
      marker.error = handled.error().message;
      ATREX_TRY(put_final(marker));
      ack();
      count(task->agent.name, "error");
      return tl::unexpected(handled.error());
    }
    release(handled.error().message);
    count(task->agent.name, "released");
    return tl::unexpected(handled.error());
  }
  ack();
  return true;
}

void AgentWorker::run(const std::atomic<bool>& stop) {
  while (!stop.load()) {
    auto r = run_once(&stop);
    if (!r && !stop.load())
      spdlog::error("agent worker {}: {}", options_.consumer, r.error().message);
  }
}

}  // namespace atrex::agent

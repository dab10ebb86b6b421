// Sweep bookkeeping shared by the local and the cluster sweep (DESIGN.md §2: "the sweep manifest
// on disk is the source of truth, anything not done is re-enqueued"): the results folder and
// its manifest, the reconciler that enqueues what is neither done nor in flight, and the tasks
// the sweep completed without (dead letters).
#pragma once

#include <filesystem>
#include <functional>
#include <set>
#include <string>
#include <vector>

#include "atrex/common/queue.h"
#include "atrex/common/result_store.h"
#include "atrex/common/wire/agent_task.h"
#include "atrex/common/wire/manifest.h"
#include "atrex/scoring/report.h"

namespace atrex::scheduler {

using ProgressFn = std::function<void(const std::string&)>;

// Creates the results folder `resolved.output` and writes its manifest.json: the resolved sweep,
// with the lifecycle of the manifest already there (launcher state, start times) kept, then
// `update` applied; this atrex build and candidate compiler are appended to `builds` when they
// differ from the last entry (build_record.h). A folder that holds a different sweep (another id) is refused
// (kInvalidInput, naming both ids).
Result<Manifest> open_results_dir(const Manifest& resolved,
                                  const std::function<void(Manifest&)>& update);
// Applies `update` to <dir>/manifest.json.
Result<Manifest> update_manifest(const std::filesystem::path& dir,
                                 const std::function<void(Manifest&)>& update);

// The first agent task of sub-agent `subagent` (of the agent's parallel_generations) of
// (agent, operator), continuing from its audit trail when there is one
// (<audit_dir>/<agent>/<op>.jsonl: that sub-agent's generation, iterations spent, best).
Result<AgentTask> agent_task_for(const Manifest& sweep, const AgentSpec& agent,
                                 const OperatorPlan& op, const std::filesystem::path& audit_dir,
                                 int subagent = 0);

// Reconciler: enqueues an agent task for every (agent, operator) that has no final marker and
// no agent task in flight. Dead-lettered agent tasks are finalized first (below), so they are
// never enqueued again. Returns how many were enqueued.
Result<int> enqueue_missing(const Manifest& sweep, TaskQueue& queue, ResultStore& store,
                            const ProgressFn& say);

// The agent tasks to enqueue: per (agent, operator) without a final marker, as "agent/op"
// (sub-agent 0) or "agent/op#k", each sub-agent with no task in flight (ready or leased) whose
// chain has not ended (from the audit trail, with parallel_generations > 1). Dead-lettered agent
// tasks are finalized first.
Result<std::set<std::string>> missing_agent_tasks(const Manifest& sweep, TaskQueue& queue,
                                                  ResultStore& store);

// The running sweep's loss check (issue 14, "no task lost"): an agent task deleted from the
// queue behind its back never ends. Pairs missing now that were already missing at the last
// check (`suspects`, updated here; one check apart so a task between two states is not taken
// for lost) are enqueued again from their audit trails, told through `say`. Returns how many.
Result<int> requeue_lost_agent_tasks(const Manifest& sweep, TaskQueue& queue, ResultStore& store,
                                     std::set<std::string>& suspects, const ProgressFn& say);

// Turns agent tasks that were dead-lettered into `error` final markers, so the sweep ends.
Result<void> finalize_dead_agent_tasks(TaskQueue& queue, ResultStore& store);

// The dead letters of both streams (eval, agent).
Result<std::vector<scoring::DeadLetterSummary>> all_dead_letters(TaskQueue& queue);

// Final markers present, of agents x operators. New ones are told through `say` once (keys in
// `seen`).
Result<int> count_finals(const Manifest& sweep, ResultStore& store, std::set<std::string>& seen,
                         const ProgressFn& say);

}  // namespace atrex::scheduler

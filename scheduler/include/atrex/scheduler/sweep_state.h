// Sweep bookkeeping shared by the local sweep and cluster sweeps: the results folder and its
// manifest (the source of truth), enqueueing what is not done (the reconciler), tracking the
// (agent, operator) final markers, and reducing results into reports.
#pragma once

#include <filesystem>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "atrex/agent/loop.h"
#include "atrex/common/queue.h"
#include "atrex/common/result_store.h"
#include "atrex/scheduler/local_sweep.h"

namespace atrex::scheduler {

using ProgressFn = std::function<void(const std::string&)>;

// Creates the results folder and writes manifest.json with `fields` merged in. A folder that
// holds a different sweep (another id) is refused (kInvalidInput).
Result<Json> open_results_dir(const ResolvedSweep& sweep, const Json& fields);
// Merges `fields` into an existing manifest.json.
Result<Json> update_manifest(const std::filesystem::path& dir, const Json& fields);

// The first agent task of (agent, operator), continuing from its audit trail when there is one.
Result<agent::AgentTask> agent_task_for(const ResolvedSweep& sweep, const agent::AgentSpec& a,
                                        const OperatorPlan& op,
                                        const std::filesystem::path& audit_dir);

// Reconciler: enqueues an agent task for every (agent, operator) that has no final marker and
// no agent task in flight. Dead-lettered agent tasks are finalized first (see below), so they
// are never enqueued again. Returns how many were enqueued.
Result<int> enqueue_missing(const ResolvedSweep& sweep, TaskQueue& queue, ResultStore& store,
                            const ProgressFn& say);

// Turns agent tasks that were dead-lettered into `error` final markers, so the sweep ends.
Result<void> finalize_dead_agent_tasks(TaskQueue& queue, ResultStore& store);

// What `sweep status` and report.json list per dead letter of `stream` ("eval" or "agent"):
// queue, message_id, deliveries, error (the last failure), kind, operator, agent; eval tasks
// add task_id, purpose, candidate (file name), candidate_sha256; agent tasks generation.
Json dead_letter_json(std::string_view stream, const DeadLetter& d);
// report.md's "Dead-lettered tasks" section: one table row per dead_letter_json() object, its
// free text (the last error, file and agent names) escaped for Markdown table cells.
std::string dead_letters_markdown(const std::vector<Json>& dead);

// Final markers present, of `total`. New ones are reported through `say` once (keys in `seen`).
Result<int> count_finals(const std::vector<std::string>& agents,
                         const std::vector<std::string>& ops, ResultStore& store,
                         std::set<std::string>& seen, const ProgressFn& say);

// Scores the final records in `store` against the manifest in `dir`; writes report.json/.md.
Result<SweepOutcome> reduce(const std::filesystem::path& dir, const problems::Suite& suite,
                            ResultStore& store);

}  // namespace atrex::scheduler

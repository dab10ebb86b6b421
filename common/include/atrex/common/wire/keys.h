// Names shared by every process of a sweep: the queue streams, the result-store keys and the
// Redis key prefix (DESIGN.md §2). One definition here; nobody spells them out.
#pragma once

#include <string>
#include <string_view>

namespace atrex {

// Stream of atrex.task/1 evaluation tasks (runners consume it).
inline constexpr const char* kEvalStream = "eval";
// Stream of atrex.agent-task/1 tasks, one AKA generation each (agent workers consume it).
inline constexpr const char* kAgentStream = "agent";
inline constexpr const char* kAllStreams[] = {kEvalStream, kAgentStream};

// Result-store key of a shape's atrex.eval/1 record: "<task_id>/<shape_id>".
std::string record_key(std::string_view task_id, std::string_view shape_id);
// Result-store key of the atrex.final/1 marker of (agent, operator): "final/<agent>/<op>".
std::string final_key(std::string_view agent, std::string_view op);

// Redis key prefix of a sweep: "atrex:{<sweep id>}". The hash tag keeps all of a sweep's keys
// in one slot (Lua scripts need that on a Redis Cluster) and is what sweeps are sharded by.
std::string sweep_prefix(std::string_view sweep_id);
// The Redis key holding a sweep's atrex.manifest/1 for its workers: "<prefix>:manifest".
std::string manifest_key(std::string_view sweep_id);

}  // namespace atrex

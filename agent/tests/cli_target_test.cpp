// `target: cuda | triton | torch` of a cli agent (docs/python-candidates.md "Agents that write
// Python"): the sweep-file field, the workspace and brief a Python target stages (Atrex-Bench's
// generated_kernel.py with the reference's signature, not the C ABI), the native target's
// unchanged, and targets refused where they cannot be honoured (a provider that writes no
// candidates, a backend that cannot evaluate them).
#include <algorithm>
#include <string>

#include <gtest/gtest.h>

#include "atrex/agent/spec.h"
#include "atrex/agent/target.h"
#include "atrex/common/json_io.h"
#include "cli/options.h"
#include "cli/task_text.h"

namespace atrex::agent::cli {
namespace {

Result<AgentSpec> spec_of(const std::string& yaml) {
  auto registry = ProviderRegistry::builtin();
  EXPECT_TRUE(registry) << registry.error().message;
  auto j = parse_yaml_to_json(yaml, "/sweeps/sweep.yaml");
  EXPECT_TRUE(j) << j.error().message;
  return agent_spec_from_json(JsonField(*j, "/sweeps/sweep.yaml", "agents.0"), *registry);
}

const std::string* file_named(const TaskFiles& files, const std::string& name) {
  auto it = std::find_if(files.begin(), files.end(), [&](const auto& f) { return f.first == name; });
  return it == files.end() ? nullptr : &it->second;
}

TEST(CliTarget, TargetParsesStrictlyRoundTripsAndOnlyANonDefaultOneIsKept) {
  auto torch = spec_of("name: a\nprovider: cli\npreset: claude\ntarget: torch\n");
  ASSERT_TRUE(torch) << torch.error().message;
  EXPECT_EQ(torch->options.value("target", ""), "torch");
  auto o = options_from_json(torch->options, "t");
  ASSERT_TRUE(o) << o.error().message;
  EXPECT_EQ(o->target, Target::kTorch);
  auto back = options_from_json(to_json(*o), "t");
  ASSERT_TRUE(back) << back.error().message;
  EXPECT_EQ(back->target, Target::kTorch);
  auto cuda = spec_of("name: a\nprovider: cli\npreset: claude\ntarget: cuda\n");
  ASSERT_TRUE(cuda) << cuda.error().message;
  EXPECT_FALSE(cuda->options.contains("target")) << "the default leaves sweep ids unchanged";
  EXPECT_EQ(options_from_json(cuda->options, "t")->target, Target::kNative);
  auto bad = spec_of("name: a\nprovider: cli\npreset: claude\ntarget: gluon\n");
  ASSERT_FALSE(bad);
  const std::string& m = bad.error().message;
  EXPECT_NE(m.find("/sweeps/sweep.yaml"), std::string::npos) << m;
  EXPECT_NE(m.find("agents.0.target"), std::string::npos) << m;
  EXPECT_NE(m.find("gluon"), std::string::npos) << m;
  EXPECT_NE(m.find("expected cuda, triton or torch"), std::string::npos) << m;
}

TEST(CliTarget, ProvidersThatWriteNoCandidatesRefuseATargetNamingFileFieldAndValue) {
  for (const char* entry : {"name: f\nprovider: fixed\nkernels: [a.cpp]\ntarget: torch\n",
                            "name: s\nprovider: search\ntarget: torch\n"}) {
    auto s = spec_of(entry);
    ASSERT_FALSE(s) << entry;
    const std::string& m = s.error().message;
    EXPECT_NE(m.find("/sweeps/sweep.yaml: field \"agents.0.target\""), std::string::npos) << m;
    EXPECT_NE(m.find("cannot write to a target"), std::string::npos) << m;
    EXPECT_NE(m.find("cli"), std::string::npos) << "names the providers that can: " << m;
    EXPECT_NE(m.find("openai"), std::string::npos) << m;
    EXPECT_NE(m.find("torch"), std::string::npos) << "names the value: " << m;
  }
}

TEST(CliTarget, BackendsThatCannotEvaluateATargetSayWhy) {
  EXPECT_FALSE(target_unsupported(Target::kTorch, Backend::kCpu));
  EXPECT_FALSE(target_unsupported(Target::kTorch, Backend::kCuda));
  EXPECT_FALSE(target_unsupported(Target::kTriton, Backend::kCuda));
  EXPECT_FALSE(target_unsupported(Target::kNative, Backend::kHip));
  ASSERT_TRUE(target_unsupported(Target::kTriton, Backend::kCpu));
  EXPECT_NE(target_unsupported(Target::kTriton, Backend::kCpu)->find("cuda backend"),
            std::string::npos);
  EXPECT_TRUE(target_unsupported(Target::kTorch, Backend::kHip));
  EXPECT_EQ(workspace_candidate_name(Target::kTorch, Backend::kCpu), "generated_kernel.py");
  EXPECT_EQ(workspace_candidate_name(Target::kNative, Backend::kCpu), "kernel.cpp");
  EXPECT_EQ(workspace_candidate_name(Target::kNative, Backend::kCuda), "kernel.cu");
}

TEST(CliTarget, PythonTargetsStageTheReleasesFormatAndTheNativeTargetTheCAbi) {
  ProposalContext ctx{"rms_norm", Backend::kCpu, 1, 0, 1, nullptr, nullptr, nullptr, nullptr};
  const TaskFiles torch = task_files(ctx, {}, Target::kTorch, 4);
  const std::string* task = file_named(torch, "TASK.md");
  ASSERT_NE(task, nullptr);
  for (const char* asked :
       {"generated_kernel.py", "class Model(torch.nn.Module)", "`__init__` and `forward`",
        "no torch.compile", "do not import or wrap the reference", "PyTorch operations only",
        "def forward(self, x, weight):", "atrex-eval generated_kernel.py", "best.py"}) {
    EXPECT_NE(task->find(asked), std::string::npos) << asked << " in\n" << *task;
  }
  EXPECT_EQ(task->find("atrex_candidate_run"), std::string::npos) << "no C ABI: " << *task;
  const std::string* sig = file_named(torch, "reference/signature.py");
  ASSERT_NE(sig, nullptr);
  EXPECT_NE(sig->find("def __init__(self, eps=1e-06):"), std::string::npos) << *sig;
  EXPECT_EQ(file_named(torch, "include/atrex/candidate.h"), nullptr);
  EXPECT_NE(file_named(torch, "reference/naive.cpp"), nullptr) << "the semantics stay";
  EXPECT_NE(cli_prompt(ctx, Target::kTorch, 4).find("generated_kernel.py"), std::string::npos);

  ctx.backend = Backend::kCuda;
  const TaskFiles triton = task_files(ctx, {}, Target::kTriton, 4);
  EXPECT_NE(file_named(triton, "TASK.md")->find("@triton.jit"), std::string::npos);

  // The native target: unchanged (kernel.cpp, the ABI headers, no Python).
  ctx.backend = Backend::kCpu;
  const TaskFiles native = task_files(ctx, {}, Target::kNative, 4);
  const std::string* ntask = file_named(native, "TASK.md");
  ASSERT_NE(ntask, nullptr);
  EXPECT_NE(ntask->find("`kernel.cpp`"), std::string::npos) << *ntask;
  EXPECT_NE(ntask->find("atrex_candidate_run"), std::string::npos);
  EXPECT_EQ(ntask->find("class Model"), std::string::npos);
  EXPECT_NE(file_named(native, "include/atrex/candidate.h"), nullptr);
  EXPECT_EQ(file_named(native, "reference/signature.py"), nullptr);
  EXPECT_NE(cli_prompt(ctx, Target::kNative, 4).find("kernel.cpp"), std::string::npos);
}

}  // namespace
}  // namespace atrex::agent::cli

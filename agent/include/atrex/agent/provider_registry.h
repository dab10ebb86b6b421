// How an agent's provider is chosen (DESIGN.md §7): the sweep file names it (`provider:`) and
// gives its own settings next to the common ones; the registry validates them when the sweep
// file is read and makes the provider when an agent task runs. Built in: `search` and `openai`.
// New providers (cli) are a ProviderFactory registered in ProviderRegistry::builtin().
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "atrex/agent/provider.h"
#include "atrex/common/error.h"
#include "atrex/common/json_io.h"
#include "atrex/common/wire/agent_task.h"

namespace atrex::agent {

class ProviderFactory {
 public:
  virtual ~ProviderFactory() = default;
  virtual std::string name() const = 0;
  // The keys of a sweep file's agent entry this provider reads (besides name, provider, budget
  // and dropout), e.g. {"templates"}.
  virtual std::vector<std::string> option_keys() const = 0;
  // Validates and normalises those keys of `agent` (the agent entry; paths relative to the
  // sweep file made absolute) into AgentSpec::options. Errors name the file, field and value.
  virtual Result<Json> parse_options(const JsonField& agent) const = 0;
  // A provider for one agent task of `spec` (its options as parse_options returned them).
  // Thread-safe: agent workers make providers concurrently.
  virtual Result<std::unique_ptr<Provider>> make(const AgentSpec& spec) const = 0;
};

class ProviderRegistry {
 public:
  // The providers this build has: search (the embedded kernel templates) and openai
  // (chat-completions servers, openai_provider.h).
  static Result<ProviderRegistry> builtin();

  void add(std::shared_ptr<ProviderFactory> factory);
  // kInvalidInput "unsupported provider "<name>" (this build has: ...)".
  Result<const ProviderFactory*> require(std::string_view name) const;
  std::vector<std::string> names() const;

 private:
  std::vector<std::shared_ptr<ProviderFactory>> factories_;
};

}  // namespace atrex::agent

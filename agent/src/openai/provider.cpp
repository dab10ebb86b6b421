// The `openai` provider and its registry entry (atrex/agent/openai_provider.h).
#include <set>

#include <fmt/format.h>

#include "atrex/agent/knowledge_base.h"
#include "atrex/agent/openai_provider.h"
#include "openai/chat_client.h"
#include "openai/code_block.h"
#include "openai/options.h"
#include "openai/prompt.h"

namespace atrex::agent {
namespace {

using openai::ChatClient;

constexpr size_t kProblemNotes = 3;  // knowledge-base excerpts in the first message

std::string trimmed(const std::string& s, size_t n) {
  return s.size() > n ? s.substr(0, n) + "..." : s;
}

// One generation's conversation. Not thread-safe (one provider per agent task).
class OpenAiProvider final : public Provider {
 public:
  OpenAiProvider(ChatClient client, const KnowledgeBase& kb, Target target)
      : client_(std::move(client)), kb_(kb), target_(target) {}
  std::string name() const override { return "openai"; }

  Result<std::optional<Proposal>> propose(const ProposalContext& ctx) override {
    if (messages_.empty()) {
      start(ctx);
    } else if (reply_needs_feedback_ && !ctx.memory->empty()) {
      add_user(openai::feedback_message(ctx.memory->back(), ctx, new_notes(ctx), target_));
    }
    reply_needs_feedback_ = false;
    Proposal p;
    auto reply = client_.complete(messages_, p.usage);
    p.provenance = Json{
        {"provider", "openai"}, {"model", client_.options().model}, {"usage", to_json(p.usage)}};
    if (!reply) {
      if (reply.error().code == ErrorCode::kInvalidInput) return tl::unexpected(reply.error());
      // The conversation stays as it is: the same request goes out next iteration.
      p.failure = reply.error().message;
      return std::optional<Proposal>{std::move(p)};
    }
    messages_.push_back(Json{{"role", "assistant"}, {"content", reply->content}});
    reply_needs_feedback_ = true;
    p.provenance["finish_reason"] = reply->finish_reason;
    p.rationale = trimmed(reply->content, 2000);
    openai::Extraction ex = openai::extract_candidate(reply->content, ctx.backend, is_python(target_));
    if (!ex.source) {
      p.failure = std::move(ex.failure);
      return std::optional<Proposal>{std::move(p)};
    }
    p.source = std::move(*ex.source);
    p.file_name = fmt::format("{}_g{}_i{}{}", ctx.op, ctx.generation, ctx.iteration,
                              candidate_extension(target_, ctx.backend));
    return std::optional<Proposal>{std::move(p)};
  }

 private:
  void start(const ProposalContext& ctx) {
    family_ = std::string(operator_family(ctx.op));
    auto notes = kb_.select(family_, ctx.backend, std::nullopt, kProblemNotes);
    for (const KbNote* n : notes) sent_notes_.insert(n->path);
    messages_ = Json::array();
    messages_.push_back(Json{{"role", "system"}, {"content", openai::system_message(ctx.backend, target_)}});
    add_user(openai::problem_message(ctx, notes, target_));
  }

  // Notes for a bottleneck the last candidate's measurements show, not sent yet.
  std::vector<const KbNote*> new_notes(const ProposalContext& ctx) {
    std::vector<const KbNote*> out;
    const auto b = openai::measured_bottleneck(ctx.memory->back());
    if (!b) return out;
    for (const KbNote* n : kb_.select(family_, ctx.backend, b, kProblemNotes)) {
      if (n->bottleneck == *b && sent_notes_.insert(n->path).second) out.push_back(n);
    }
    return out;
  }

  void add_user(std::string text) {
    messages_.push_back(Json{{"role", "user"}, {"content", std::move(text)}});
  }

  ChatClient client_;
  const KnowledgeBase& kb_;
  Target target_ = Target::kNative;
  std::string family_;
  Json messages_ = Json::array();
  bool reply_needs_feedback_ = false;  // the last reply is answered by the next user message
  std::set<std::string> sent_notes_;
};

class OpenAiFactory final : public ProviderFactory {
 public:
  OpenAiFactory(KnowledgeBase kb, openai::RetryDeps deps)
      : kb_(std::move(kb)), deps_(openai::with_real_defaults(std::move(deps))) {}
  std::string name() const override { return "openai"; }
  std::vector<std::string> option_keys() const override { return openai::option_keys(); }
  Result<Json> parse_options(const JsonField& agent) const override {
    return openai::parse_options(agent);
  }
  Result<std::unique_ptr<Provider>> make(const AgentSpec& spec) const override {
    ATREX_ASSIGN_OR_RETURN(
        openai::OpenAiOptions o,
        openai::options_from_json(spec.options, "agent " + spec.name + " options"));
    ATREX_ASSIGN_OR_RETURN(std::string key, openai::api_key_from_env(o, spec.name));
    ATREX_ASSIGN_OR_RETURN(http::Client http, http::Client::create());
    const Target target = target_of(spec.options);
    return std::unique_ptr<Provider>(std::make_unique<OpenAiProvider>(
        ChatClient(std::move(o), std::move(key), std::move(http), deps_), kb_, target));
  }

 private:
  KnowledgeBase kb_;
  openai::RetryDeps deps_;
};

}  // namespace

Result<std::shared_ptr<ProviderFactory>> make_openai_provider_factory(openai::RetryDeps deps) {
  ATREX_ASSIGN_OR_RETURN(KnowledgeBase kb, KnowledgeBase::embedded());
  return std::shared_ptr<ProviderFactory>(
      std::make_shared<OpenAiFactory>(std::move(kb), std::move(deps)));
}

}  // namespace atrex::agent

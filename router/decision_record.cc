#include "router/decision_record.h"

namespace tandem::router {

tandem::v1::DecisionRecord ToRecord(const RequestFeatures& f, const RouteDecision& d) {
  tandem::v1::DecisionRecord r;
  r.set_prompt_tokens(f.prompt_tokens);
  r.set_prompt_bytes(f.prompt_bytes);
  r.set_prompt_tokens_exact(f.prompt_tokens_exact);
  r.set_session_id(f.session_id);
  r.set_session_turn(f.session_turn);
  r.set_session_model_before(f.session_model);
  r.set_image_count(f.image_count);
  r.set_image_tokens(f.image_tokens);
  r.set_num_messages(f.num_messages);
  r.set_num_turns(f.num_turns);
  r.set_tool_count(f.tool_count);
  r.set_last_role(f.last_role);
  r.set_agent_steps(f.agent_steps);
  r.set_system_prompt_bytes(f.system_prompt_bytes);
  r.set_objective(ObjectiveName(f.objective));
  r.set_pinned_model(f.pinned_model);
  r.set_reasoning(ReasoningModeName(f.reasoning));
  r.set_max_tokens(f.max_tokens);
  r.set_requested_thinking_budget_tokens(f.thinking_budget);
  r.mutable_labels()->insert(f.labels.begin(), f.labels.end());
  r.set_tenant(f.tenant);
  r.set_code_cues(f.cues.code);
  r.set_math_cues(f.cues.math);
  r.set_reasoning_cues(f.cues.reasoning);
  r.set_structured_output_cues(f.cues.structured_output);
  r.set_deadline_ms(f.deadline_ms);
  r.set_split_key(f.split_key);
  r.set_model(d.model);
  r.set_request_class(d.request_class);
  r.set_rule(d.rule);
  r.set_policy_version(d.policy_version);
  r.set_learned_class(d.learned_class);
  r.set_learned_confidence(d.learned_confidence);
  r.set_second_opinion_asked(f.second_opinion_asked);
  r.set_second_opinion_class(f.second_opinion_class);
  r.mutable_prefix_hit_tokens()->insert(f.prefix_hit_tokens.begin(), f.prefix_hit_tokens.end());
  r.set_decided_reasoning(ReasoningModeName(d.reasoning));
  r.set_thinking_budget_tokens(d.thinking_budget);
  r.set_reasoning_source(d.reasoning_source);
  return r;
}

RequestFeatures FeaturesFromRecord(const tandem::v1::DecisionRecord& r) {
  RequestFeatures f;
  f.prompt_tokens = r.prompt_tokens();
  f.prompt_bytes = r.prompt_bytes();
  f.prompt_tokens_exact = r.prompt_tokens_exact();
  f.session_id = r.session_id();
  f.session_turn = r.session_turn();
  f.session_model = r.session_model_before();
  f.image_count = r.image_count();
  f.image_tokens = r.image_tokens();
  f.num_messages = r.num_messages();
  f.num_turns = r.num_turns();
  f.tool_count = r.tool_count();
  f.last_role = r.last_role();
  f.agent_steps = r.agent_steps();
  f.system_prompt_bytes = r.system_prompt_bytes();
  f.objective = r.objective() == "accuracy"  ? Objective::kAccuracy
                : r.objective() == "latency" ? Objective::kLatency
                                             : Objective::kAuto;
  f.pinned_model = r.pinned_model();
  f.reasoning = r.reasoning() == "on"    ? ReasoningMode::kOn
                : r.reasoning() == "off" ? ReasoningMode::kOff
                                         : ReasoningMode::kDefault;
  f.max_tokens = r.max_tokens();
  f.thinking_budget = r.requested_thinking_budget_tokens();
  f.labels.insert(r.labels().begin(), r.labels().end());
  f.tenant = r.tenant();
  if (auto it = f.labels.find("app"); it != f.labels.end()) f.app = it->second;
  f.cues.code = r.code_cues();
  f.cues.math = r.math_cues();
  f.cues.reasoning = r.reasoning_cues();
  f.cues.structured_output = r.structured_output_cues();
  f.deadline_ms = r.deadline_ms();
  f.split_key = r.split_key();
  f.classifier_text = r.prompt_text().substr(0, 8192);
  f.recorded_learned_class = r.learned_class();
  f.recorded_learned_confidence = r.learned_confidence();
  f.second_opinion_asked = r.second_opinion_asked();
  f.second_opinion_class = r.second_opinion_class();
  f.prefix_hit_tokens.insert(r.prefix_hit_tokens().begin(), r.prefix_hit_tokens().end());
  return f;
}

}  // namespace tandem::router

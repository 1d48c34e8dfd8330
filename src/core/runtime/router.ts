import { routingPattern } from '../config/routing-pattern.js';
import type { RoutingRule, RuntimeConfig } from '../config/runtime-schema.js';
import { ROUTING_POLICIES, type RoutingPolicy, type Verdict } from '../events/catalog/route.js';
import type { ModelValidationFailure } from './model-adapter.js';
import type { ModelRegistry } from './models/model-registry.js';
import type { PatternAdvice, PatternAlternative } from './patterns/pattern-store.js';

export { ROUTING_POLICIES, type RoutingPolicy, type Verdict };

export interface ChainEntry {
  policy: RoutingPolicy;
  verdict: Verdict;
  candidate_model: string | null;
  reason: string;
  rule_name: string | null;
  confidence: number | null;
  pattern_alternatives: PatternAlternative[] | null;
  validation_failure: ModelValidationFailure | null;
}

export interface RouteInput {
  readonly messageText: string;
  readonly overrideModel: string | null;
  readonly stickyModel: string | null;
  readonly workspacePath: string;
  /** The tier model a planner asked for, for a worker session's turn. */
  readonly delegateModel: string | null;
  /**
   * The pattern store's advice for this message, given the model the other policies would use (slot 4);
   * absent when pattern routing is off.
   */
  readonly advise?: (otherwise: string) => PatternAdvice;
}

export interface RouteDecision {
  readonly chosen_model: string;
  readonly winner_index: number;
  readonly elapsed_ms: number;
  readonly chain: ChainEntry[];
  /** What the pattern store advised (not part of `route.decided`: `pattern.matched` carries it). */
  readonly pattern: PatternAdvice | null;
}

/** Every candidate was rejected: there is nothing to put in `route.decided.chosen_model`. */
export interface NoRoute {
  readonly chosen_model: null;
  readonly elapsed_ms: number;
  readonly chain: ChainEntry[];
  readonly pattern: PatternAdvice | null;
}

interface Candidate {
  model: string | null;
  reason: string;
  rule_name?: string | null;
  confidence?: number | null;
  pattern_alternatives?: PatternAlternative[] | null;
}

/**
 * Walks the seven policies in order (routing chain of `route.decided`). The first candidate that can
 * serve wins; a candidate that cannot is `rejected` with its validation failure; policies after the
 * winner that had a candidate are `deferred`, the others `not_applicable`. The chain tells why the
 * winner won. When every candidate is rejected the result is a {@link NoRoute} with the full chain
 * (docs/decisions.md "A turn no model can serve").
 */
export function decideRoute(
  input: RouteInput,
  config: RuntimeConfig,
  models: ModelRegistry,
  rules: readonly RoutingRule[] = config.routing_rules,
): RouteDecision | NoRoute {
  const started = performance.now();
  const candidates = candidatesFor(input, config, rules);
  const pattern = patternCandidate(input, candidates, models);
  candidates.pattern = pattern.candidate;
  const chain: ChainEntry[] = [];
  let winner = -1;
  ROUTING_POLICIES.forEach((policy, index) => {
    const candidate = candidates[policy];
    const entry: ChainEntry = {
      policy,
      verdict: 'not_applicable',
      candidate_model: candidate.model,
      reason: candidate.reason,
      rule_name: candidate.rule_name ?? null,
      confidence: candidate.confidence ?? null,
      pattern_alternatives: candidate.pattern_alternatives ?? null,
      validation_failure: null,
    };
    if (candidate.model !== null) {
      if (winner >= 0) {
        entry.verdict = 'deferred';
        entry.reason = `${candidate.reason}; ${ROUTING_POLICIES[winner]} decided first`;
      } else {
        const resolution = models.resolve(candidate.model);
        if (resolution.ok) {
          entry.verdict = 'chose';
          winner = index;
        } else {
          entry.verdict = 'rejected';
          entry.validation_failure = resolution.failure;
          const detail = resolution.detail ? `: ${resolution.detail}` : '';
          entry.reason = `${candidate.reason}; ${candidate.model} cannot serve (${resolution.failure}${detail})`;
        }
      }
    }
    chain.push(entry);
  });
  const elapsed_ms = Math.round((performance.now() - started) * 1000) / 1000;
  // The global default always has a candidate; no winner means every candidate was rejected.
  if (winner < 0) return { chosen_model: null, elapsed_ms, chain, pattern: pattern.advice };
  return {
    chosen_model: chain[winner]!.candidate_model!,
    winner_index: winner,
    elapsed_ms,
    chain,
    pattern: pattern.advice,
  };
}

/**
 * Slot 4: the pattern store is asked about the model the chain would otherwise use (the first other
 * candidate that can serve); its recommendation, if any, is the pattern policy's candidate, `chose` when
 * no earlier policy decided and `deferred` behind one that did.
 */
function patternCandidate(
  input: RouteInput,
  candidates: Record<RoutingPolicy, Candidate>,
  models: ModelRegistry,
): { candidate: Candidate; advice: PatternAdvice | null } {
  if (input.delegateModel !== null)
    return {
      candidate: { model: null, reason: 'worker session: routed by its delegate tier' },
      advice: null,
    };
  if (input.advise === undefined)
    return { candidate: { model: null, reason: 'pattern routing is off' }, advice: null };
  const otherwise = ROUTING_POLICIES.filter((p) => p !== 'pattern')
    .map((p) => candidates[p].model)
    .find((model) => model !== null && models.resolve(model).ok);
  if (otherwise === undefined || otherwise === null)
    return { candidate: { model: null, reason: 'no other model can serve to compare with' }, advice: null };
  const advice = input.advise(otherwise);
  return {
    candidate: {
      model: advice.model,
      reason: advice.reason,
      confidence: advice.confidence,
      pattern_alternatives: advice.alternatives === null ? null : [...advice.alternatives],
    },
    advice,
  };
}

function candidatesFor(
  input: RouteInput,
  config: RuntimeConfig,
  rules: readonly RoutingRule[],
): Record<RoutingPolicy, Candidate> {
  // RE2, not RegExp: a rule's match time is linear in the message whatever its pattern (issue 12).
  const rule = rules.find((r) => routingPattern(r.match).test(input.messageText));
  const workspaceModel = config.workspace_models[input.workspacePath] ?? null;
  return {
    per_message_override: input.overrideModel
      ? { model: input.overrideModel, reason: 'model given with this message' }
      : { model: null, reason: 'no model given with this message' },
    manual_sticky: input.stickyModel
      ? { model: input.stickyModel, reason: 'model set for this session' }
      : { model: null, reason: 'no model set for this session' },
    // A worker runs on the model of the tier its planner asked for (bus §6.8, §8.3: delegate_request
    // chooses); a rule matched by the planner-written task must not send it elsewhere.
    rule: input.delegateModel
      ? { model: null, reason: 'worker session: routed by its delegate tier, not by rules' }
      : rule
        ? { model: rule.model, reason: `message matches rule "${rule.name}"`, rule_name: rule.name }
        : {
            model: null,
            reason: rules.length ? 'no rule matches the message' : 'no rules configured',
          },
    // Filled in by patternCandidate, which needs the other candidates first.
    pattern: { model: null, reason: 'pattern routing is off' },
    delegate_request: input.delegateModel
      ? { model: input.delegateModel, reason: 'worker session: model of the requested tier' }
      : { model: null, reason: 'not a worker session' },
    workspace_default: workspaceModel
      ? { model: workspaceModel, reason: 'default model of this workspace' }
      : { model: null, reason: 'no default model for this workspace' },
    global_default: { model: config.default_model, reason: 'global default model' },
  };
}

import { describe, expect, it } from 'vitest';
import { runtimeConfig } from '../../src/core/config/runtime-schema.js';
import { ModelRegistry } from '../../src/core/runtime/models/model-registry.js';
import { decideRoute, ROUTING_POLICIES, type RouteInput } from '../../src/core/runtime/router.js';
import { testRuntimeConfig } from '../helpers/runtime-config.js';

const WORKSPACE = '/work/project';

/** Every policy with a candidate of its own, each naming a different scripted model. */
const ALL_CANDIDATES = {
  per_message_override: 'scripted:override',
  manual_sticky: 'scripted:sticky',
  rule: 'scripted:rule',
  delegate_request: 'scripted:delegate',
  workspace_default: 'scripted:workspace',
  global_default: 'scripted:global',
} as const;

type Offered = Partial<Record<keyof typeof ALL_CANDIDATES, true>>;

function route(offered: Offered) {
  const config = runtimeConfig(
    testRuntimeConfig({
      default_model: ALL_CANDIDATES.global_default,
      routing_rules: offered.rule ? [{ name: 'deploys', match: 'deploy', model: ALL_CANDIDATES.rule }] : [],
      workspace_models: offered.workspace_default ? { [WORKSPACE]: ALL_CANDIDATES.workspace_default } : {},
    }),
  );
  const input: RouteInput = {
    messageText: 'deploy the site',
    overrideModel: offered.per_message_override ? ALL_CANDIDATES.per_message_override : null,
    stickyModel: offered.manual_sticky ? ALL_CANDIDATES.manual_sticky : null,
    workspacePath: WORKSPACE,
    delegateModel: offered.delegate_request ? ALL_CANDIDATES.delegate_request : null,
  };
  return decideRoute(input, config, new ModelRegistry(config));
}

describe('routing precedence (bus §6.5): the first policy with a servable candidate wins', () => {
  it('a valid per-message model beats every other policy, the global default included', () => {
    const decision = route({
      per_message_override: true,
      manual_sticky: true,
      rule: true,
      workspace_default: true,
      global_default: true,
    });
    expect(decision).toMatchObject({ chosen_model: 'scripted:override', winner_index: 0 });
    const verdicts = decision.chain.map((entry) => [entry.policy, entry.verdict]);
    expect(verdicts).toEqual([
      ['per_message_override', 'chose'],
      ['manual_sticky', 'deferred'],
      ['rule', 'deferred'],
      ['pattern', 'not_applicable'],
      ['delegate_request', 'not_applicable'],
      ['workspace_default', 'deferred'],
      ['global_default', 'deferred'],
    ]);
  });

  // Offer the candidates from one policy down: each time, the highest offered one must win.
  const ordered = (['per_message_override', 'manual_sticky', 'rule', 'workspace_default'] as const).map(
    (policy, index, all) => [policy, all.slice(index)] as const,
  );
  it.each(ordered)(
    'with %s the highest offered candidate, it wins over the ones below',
    (policy, offered) => {
      const decision = route(Object.fromEntries(offered.map((p) => [p, true])) as Offered);
      expect(decision.chosen_model).toBe(ALL_CANDIDATES[policy]);
      expect(decision).toMatchObject({ winner_index: ROUTING_POLICIES.indexOf(policy) });
      expect(decision.chain.at(-1)).toMatchObject({ policy: 'global_default', verdict: 'deferred' });
    },
  );

  it('a worker turn runs on its delegate tier, not on the global default', () => {
    const decision = route({ delegate_request: true });
    expect(decision).toMatchObject({ chosen_model: 'scripted:delegate', winner_index: 4 });
  });

  it('the global default wins only when nothing above it offers a model', () => {
    const decision = route({});
    expect(decision).toMatchObject({ chosen_model: 'scripted:global', winner_index: 6 });
    expect(decision.chain.slice(0, 6).every((entry) => entry.verdict === 'not_applicable')).toBe(true);
  });
});

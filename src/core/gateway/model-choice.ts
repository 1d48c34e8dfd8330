import type { GatewayConfig } from '../config/gateway-schema.js';
import type { ModelAdapter } from '../runtime/model-adapter.js';
import { decideRoute, type RouteDecision } from '../runtime/router.js';
import type { Runtime } from '../runtime/runtime.js';
import { GatewayError } from './gateway-error.js';
import { type InboundRequest, lastUserText } from './inbound/inbound-request.js';
import { mayUseModel, type StoredKey } from './keystore.js';

/** Names that leave the choice to metis's router (its rules, workspace and global defaults). */
const ROUTER_NAMES = new Set(['metis', 'auto', 'default']);

/**
 * The model a client named, as metis's router takes it: a metis id (`provider:name`, e.g.
 * `scripted:demo`, `anthropic:claude-sonnet-4-5`) or an alias of `gateway.model_aliases` is the
 * request's own choice (the router's per-message override); `metis`, `auto` and any other name leave
 * the choice to the routing rules and defaults, so an app written for one provider is served by the
 * model metis picks.
 */
export function requestedModel(model: string, config: GatewayConfig): string | null {
  const alias = config.model_aliases[model];
  if (alias !== undefined) return alias;
  if (ROUTER_NAMES.has(model)) return null;
  return /^[a-z0-9][a-z0-9_-]*:.+$/.test(model) ? model : null;
}

/**
 * Routes a gateway request (the router's chain, health included) and checks the key may use the model
 * chosen. Decided before anything is emitted: a request no model can serve, or that its key may not
 * use, is refused without a session.
 */
export function chooseModel(
  runtime: Runtime,
  config: GatewayConfig,
  request: InboundRequest,
  key: StoredKey,
): { route: RouteDecision; adapter: ModelAdapter } {
  const override = requestedModel(request.model, config);
  if (override !== null && !mayUseModel(key, override))
    throw new GatewayError('permission', `model: this key may not use ${override}`, { param: 'model' });
  const route = decideRoute(
    {
      messageText: lastUserText(request),
      overrideModel: override,
      stickyModel: null,
      workspacePath: key.workspace_path,
      delegateModel: null,
    },
    runtime.config,
    runtime.models,
    runtime.routing.rules,
  );
  // A model metis has no provider for is a typo or a missing config, not an outage to route around.
  const named = route.chain[0];
  if (override !== null && named?.verdict === 'rejected' && named.validation_failure === 'not_configured')
    throw new GatewayError('not_found', `model: ${override} cannot serve (${named.reason})`, {
      param: 'model',
    });
  if (route.chosen_model === null) {
    const reasons = route.chain.filter((entry) => entry.verdict === 'rejected').map((entry) => entry.reason);
    throw new GatewayError(
      override === null ? 'upstream' : 'not_found',
      `model: no model can serve this request (${reasons.join('; ') || 'no candidate'})`,
      { param: 'model' },
    );
  }
  if (!mayUseModel(key, route.chosen_model))
    throw new GatewayError(
      'permission',
      `model: metis routed this request to ${route.chosen_model}, which this key may not use`,
      {
        param: 'model',
      },
    );
  const resolution = runtime.models.resolve(route.chosen_model);
  if (!resolution.ok)
    throw new GatewayError('upstream', `model: ${route.chosen_model} cannot serve (${resolution.failure})`);
  return { route, adapter: resolution.adapter };
}

/** The models a key may name in `GET /v1/models`: its own list, else every model the config names. */
export function listedModels(runtime: Runtime, config: GatewayConfig, key: StoredKey): string[] {
  if (key.allowed_models !== null) return [...key.allowed_models];
  const names = new Set<string>([runtime.config.default_model]);
  for (const model of Object.values(runtime.config.workspace_models)) names.add(model);
  for (const rule of runtime.routing.rules) names.add(rule.model);
  for (const model of Object.keys(runtime.config.pricing)) if (!model.endsWith(':*')) names.add(model);
  for (const alias of Object.keys(config.model_aliases)) names.add(alias);
  return [...names].sort();
}

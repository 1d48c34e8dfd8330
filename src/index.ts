/** The public API of metis for programs that embed it. */

export * from './client/index.js';
export { type EmitInput, EventBus, type EventBusOptions } from './core/bus/event-bus.js';
export { slow } from './core/bus/slow.js';
export type { Subscription, SubscriptionHandle, UnsubscribeReason } from './core/bus/subscription.js';
export * from './core/errors.js';
export * from './core/events/index.js';
export {
  definePlugin,
  type OptionsSchema,
  type PluginContext,
  type PluginDefinition,
  type PluginFilter,
  type PluginInstance,
  type TraceQuery,
} from './plugins/define-plugin.js';

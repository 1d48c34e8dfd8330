import { CATALOG_ENTRIES } from './catalog/index.js';
import { STREAMING_ENTRIES } from './streaming.js';

export type PresetName = 'preset:chat' | 'preset:full';

const CHAT_CATALOG_PREFIXES = ['turn.', 'feedback.', 'delegate.', 'tool.confirmation_'];
const CHAT_CATALOG_TYPES = new Set([
  'tool.called',
  'tool.completed',
  'tool.failed',
  'route.decided',
  // The worked examples of streaming spec §10.1 and §10.3 show the model calls under preset:chat
  // (docs/decisions.md "preset:chat and the model calls").
  'llm.call_started',
  'llm.call_completed',
  'llm.call_failed',
]);

/**
 * `preset:chat`: what a chat view renders (DESIGN.md, plus the model calls of streaming spec §10):
 * every streaming-only type, tool results, tool confirmations, the route decision, turn lifecycle,
 * feedback, delegation and the model calls.
 */
function chatTypes(): string[] {
  const catalog = CATALOG_ENTRIES.map((e) => e.type).filter(
    (type) => CHAT_CATALOG_TYPES.has(type) || CHAT_CATALOG_PREFIXES.some((p) => type.startsWith(p)),
  );
  return [...STREAMING_ENTRIES.map((e) => e.type), ...catalog];
}

/** `preset:full`: every type of both families. */
function fullTypes(): string[] {
  return [...STREAMING_ENTRIES.map((e) => e.type), ...CATALOG_ENTRIES.map((e) => e.type)];
}

export const PRESETS: Readonly<Record<PresetName, readonly string[]>> = {
  'preset:chat': Object.freeze(chatTypes()),
  'preset:full': Object.freeze(fullTypes()),
};

export function isPresetName(value: unknown): value is PresetName {
  return value === 'preset:chat' || value === 'preset:full';
}

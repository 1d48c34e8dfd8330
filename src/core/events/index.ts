export { AUDIT_EVENT_TYPES, CATALOG, CATALOG_DOMAINS, CATALOG_ENTRIES } from './catalog/index.js';
export { microsToIso, nowMicros } from './clock.js';
export type { CatalogEntry, StreamingEntry } from './define.js';
export * from './envelope.js';
export * from './filter.js';
export { ensureIdsAfter, newEventId, newId } from './ids.js';
export { isPresetName, PRESETS, type PresetName } from './presets.js';
export { STREAMING, STREAMING_ENTRIES, STREAMING_TYPES } from './streaming.js';

import type { RuntimeConfigInput } from '../../src/core/config/runtime-schema.js';

/**
 * The runtime config of every test rig (no vitest here: the trace recorder uses it too): tools run
 * without asking, and the scripted model streams at full speed except for `slow:` messages.
 */
export function testRuntimeConfig(config: RuntimeConfigInput = {}): RuntimeConfigInput {
  return {
    tool_confirmation: { write: 'allow', execute: 'allow', network: 'allow' },
    ...config,
    scripted: { token_delay_ms: 0, slow_token_delay_ms: 5, slow_tokens: 400, ...config.scripted },
  };
}

import type { EventBus } from '../bus/event-bus.js';
import type { RuntimeConfig } from '../config/runtime-schema.js';
import type { ChildProcessRecord } from './child-process-record.js';
import type { Delegations } from './delegations.js';
import { MemoryStore } from './memory/memory-store.js';
import type { SkillSessions } from './skills/skill-sessions.js';
import { builtinTools } from './tools/builtin.js';
import { createDelegateTool } from './tools/delegate.js';
import { SecretPaths } from './tools/secret-paths.js';
import type { Tool } from './tools/tool.js';

/** The tools a runtime offers: the built-ins as configured, delegation, then the extra ones given. */
export function runtimeTools(options: {
  readonly bus: EventBus;
  readonly config: RuntimeConfig;
  readonly skills: SkillSessions;
  readonly delegations: Delegations;
  readonly childProcesses?: ChildProcessRecord;
  readonly protectedPaths?: readonly string[];
  readonly extra?: readonly Tool[];
}): Tool[] {
  const { config, delegations } = options;
  return [
    ...builtinTools({
      shell: { timeoutMs: config.shell_timeout_ms, children: options.childProcesses },
      readFile: {
        outsideWorkspace: config.outside_workspace,
        secrets: new SecretPaths({ patterns: config.secret_paths, protectedPaths: options.protectedPaths }),
      },
      memory: { store: new MemoryStore(options.bus, config.memory.max_bytes) },
      skills: { skills: options.skills },
    }),
    createDelegateTool((input, context) => delegations.run(input, context)),
    ...(options.extra ?? []),
  ];
}

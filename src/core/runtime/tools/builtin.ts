import { currentTimeTool } from './current-time.js';
import { createMemoryTool, type MemoryToolOptions } from './memory-tool.js';
import { createReadFileTool, type ReadFileToolOptions } from './read-file.js';
import { createShellTool, type ShellToolOptions } from './shell.js';
import { createSkillTools, type SkillToolsOptions } from './skill-tools.js';
import type { Tool } from './tool.js';

export interface BuiltinToolsOptions {
  readonly readFile?: ReadFileToolOptions;
  readonly shell?: ShellToolOptions;
  /** The workspace memory; without it there is no `memory` tool. */
  readonly memory?: MemoryToolOptions;
  /** The sessions' skills; without them there are no `skill_load` and `skill_search` tools. */
  readonly skills?: SkillToolsOptions;
}

/** The tools every session gets: `current_time`, `read_file` and `shell`, and `memory` when given its store. */
export function builtinTools(options: BuiltinToolsOptions = {}): Tool[] {
  return [
    currentTimeTool,
    createReadFileTool(options.readFile),
    createShellTool(options.shell),
    ...(options.memory ? [createMemoryTool(options.memory)] : []),
    ...(options.skills ? createSkillTools(options.skills) : []),
  ];
}

import { currentTimeTool } from './current-time.js';
import { createReadFileTool, type ReadFileToolOptions } from './read-file.js';
import { createShellTool, type ShellToolOptions } from './shell.js';
import type { Tool } from './tool.js';

export interface BuiltinToolsOptions {
  readonly readFile?: ReadFileToolOptions;
  readonly shell?: ShellToolOptions;
}

/** The tools every session gets: `current_time`, `read_file` and `shell`. */
export function builtinTools(options: BuiltinToolsOptions = {}): Tool[] {
  return [currentTimeTool, createReadFileTool(options.readFile), createShellTool(options.shell)];
}

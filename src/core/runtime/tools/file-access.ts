import type { SecretPaths } from './secret-paths.js';
import type { CallConfirmation } from './tool.js';
import { ToolError } from './tool.js';
import type { ResolvedPath } from './workspace-path.js';

/** `runtime.outside_workspace`: what a file tool does with a path whose real location is outside. */
export type OutsideWorkspacePolicy = 'ask' | 'deny' | 'allow';

export interface FileAccessRules {
  readonly outsideWorkspace: OutsideWorkspacePolicy;
  readonly secrets: SecretPaths;
}

/**
 * The one decision every file tool makes before touching a path (docs/configuration.md "Files the
 * agent can read"): returns the confirmation the call needs (null: it may run), or throws
 * `permission_denied` when `runtime.outside_workspace` is `deny`. Order matters:
 * 1. outside + `deny` refuses, even a secrets file (nothing is read, nobody is asked);
 * 2. a file that may hold secrets asks, every time: inside the workspace, under `allow`, and after
 *    an "allow for the session" (its confirmation is not session-allowable);
 * 3. outside + `ask` asks; an "allow for the session" covers later reads outside;
 * 4. otherwise the call runs.
 */
export async function fileAccessConfirmation(
  toolName: string,
  verb: string,
  resolved: ResolvedPath,
  rules: FileAccessRules,
): Promise<CallConfirmation | null> {
  const outside = !resolved.insideWorkspace;
  if (outside && rules.outsideWorkspace === 'deny') {
    throw new ToolError(
      'permission_denied',
      `${toolName}: ${resolved.real}${givenNote(resolved)} is outside the workspace ${resolved.workspace}, ` +
        'and runtime.outside_workspace is "deny"; nothing was read. Set runtime.outside_workspace to ' +
        '"ask" (or "allow") in the metis config to let the agent read files outside the workspace.',
    );
  }
  const secret = await rules.secrets.match(resolved.real);
  if (secret !== null) {
    const where = outside ? `, outside the workspace ${resolved.workspace}` : '';
    return {
      side_effects: 'read',
      input_summary:
        `${verb} ${resolved.real}${givenNote(resolved)}: may hold secrets (${secret.why})${where}; ` +
        'asked every time',
      session_allowable: false,
    };
  }
  if (outside && rules.outsideWorkspace === 'ask') {
    return {
      side_effects: 'read',
      input_summary: `${verb} ${resolved.real}${givenNote(resolved)}: outside the workspace ${resolved.workspace}`,
      session_allowable: true,
    };
  }
  return null;
}

/** The path as given, when it differs from the resolved one (a symlink, `..`, a relative path). */
function givenNote(resolved: ResolvedPath): string {
  return resolved.given === resolved.real ? '' : ` (given as ${JSON.stringify(resolved.given)})`;
}

/** Thrown by commands after they printed their own message, to exit with a code and nothing more. */
export class ExitError extends Error {
  constructor(readonly exitCode: number) {
    super(`exit ${exitCode}`);
  }
}

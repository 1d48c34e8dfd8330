/** What every view reports when a call fails: a 401 turns the whole page into the sign-in help. */
export type Report = (error: unknown) => void;

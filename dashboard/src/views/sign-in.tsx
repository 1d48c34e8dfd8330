/** Shown for a missing or wrong token: how to get in, never a blank page. */
export function SignIn() {
  return (
    <main class="sign-in" data-testid="sign-in">
      <h1>Sign in to metis</h1>
      <p>This page needs the server's access token, and this browser does not have it (or it is wrong).</p>
      <ol>
        <li>
          Open the link <code>metis serve</code> printed when it started, on its <code>dashboard</code> line:{' '}
          <code>http://127.0.0.1:8421/?login=…</code>. A link works once; this page then keeps an access key
          for this address (in its own storage, which no other address can read).
        </li>
        <li>
          Used it already, or it is older than 15 minutes? Run <code>metis dashboard</code> on the machine
          running the server, as the same user, for a fresh link.
        </li>
      </ol>
    </main>
  );
}

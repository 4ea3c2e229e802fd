// lib/infra/startup.ts: a start-up step is retried until it succeeds, an attempt that neither
// succeeds nor fails is abandoned after its limit (a gateway once waited on such a JetStream
// request for good and never listened), an abandoned attempt failing later is no unhandled
// rejection, and `stop` ends the retries.
import t from 'tap';
import { startupStep, StartupTimeoutError } from '../../lib/infra/startup.js';

const fast = { pauseMs: () => 5 };

t.test('an attempt that hangs is abandoned after attemptMs and tried again', async (t) => {
  const unhandled: unknown[] = [];
  const onUnhandled = (e: unknown) => unhandled.push(e);
  process.on('unhandledRejection', onUnhandled);
  t.teardown(() => {
    process.off('unhandledRejection', onUnhandled);
  });
  let calls = 0;
  const retries: unknown[] = [];
  const started = Date.now();
  const v = await startupStep(
    'the test step',
    () => {
      calls++;
      // The first attempt never settles until long after it was abandoned, and then fails.
      if (calls === 1) return new Promise<string>((_, reject) => setTimeout(() => reject(new Error('late failure')), 200));
      return Promise.resolve('ok');
    },
    { ...fast, attemptMs: 50, onRetry: (e) => retries.push(e) },
  );
  t.equal(v, 'ok', 'the second attempt succeeds');
  t.equal(calls, 2);
  t.ok(Date.now() - started < 190, 'without waiting for the hung attempt');
  t.equal(retries.length, 1);
  t.ok(retries[0] instanceof StartupTimeoutError, 'the retry names the timeout');
  t.match(String(retries[0]), /the test step did not finish within 50 ms/);
  await new Promise((r) => setTimeout(r, 300)); // the abandoned attempt fails meanwhile
  t.same(unhandled, [], 'its late failure is no unhandled rejection');
});

t.test('failures are retried with the pause in between; stop ends the retries with the last error', async (t) => {
  let calls = 0;
  const v = await startupStep('flaky', async () => {
    if (++calls < 4) throw new Error(`no ${calls}`);
    return calls;
  }, fast);
  t.equal(v, 4, 'succeeds on the fourth attempt');
  // Without attemptMs an attempt takes as long as it takes (an SQL step is never made twice at once).
  let slow = 0;
  t.equal(await startupStep('slow', () => new Promise<string>((r) => setTimeout(() => r(`done ${++slow}`), 80)), fast), 'done 1', 'one slow attempt, not abandoned');

  let stopping = false;
  let n = 0;
  await t.rejects(
    startupStep('never', async () => {
      n++;
      if (n === 3) stopping = true;
      throw new Error(`attempt ${n}`);
    }, { ...fast, stop: () => stopping }),
    /attempt 3/,
    'stop: the last error, no more attempts',
  );
  t.equal(n, 3);
  // stop from the start: one attempt only, its timeout the error.
  await t.rejects(startupStep('hung once', () => new Promise(() => {}), { ...fast, attemptMs: 20, stop: () => true }), StartupTimeoutError);
});

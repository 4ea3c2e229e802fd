// The gateway's per-token rate limiter (gateway/rate-limiter.ts).
import t from 'tap';
import { RateLimiter } from '../../gateway/rate-limiter.js';

t.test('rate limiter: burst, then the rate', async (t) => {
  const rl = new RateLimiter(10, 3);
  t.same([rl.take('k', 0), rl.take('k', 0), rl.take('k', 0), rl.take('k', 0)], [true, true, true, false]);
  t.equal(rl.take('k', 100), true, 'one token after 100 ms at 10/s');
  t.equal(rl.take('k', 100), false);
  t.equal(rl.take('other', 100), true, 'keys are independent');
});

t.test('rate limiter: a batch takes up to n tokens; has() takes none', async (t) => {
  const rl = new RateLimiter(10, 5);
  t.equal(rl.has('k', 0), true);
  t.equal(rl.takeUpTo('k', 3, 0), 3);
  t.equal(rl.takeUpTo('k', 3, 0), 2, 'only what is left');
  t.equal(rl.takeUpTo('k', 3, 0), 0);
  t.equal(rl.has('k', 0), false);
  t.equal(rl.take('k', 0), false, 'single requests share the budget');
  t.equal(rl.has('k', 100), true, 'refilled after 100 ms at 10/s');
  t.equal(rl.has('k', 100), true, 'has() took nothing');
  t.equal(rl.takeUpTo('k', 5, 100), 1);
});

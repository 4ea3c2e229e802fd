// The password rules (lib/domain/passwords.ts): length, the common-password list, the address.
import t from 'tap';
import { passwordProblem, COMMON_PASSWORDS, PASSWORD_MAX_LENGTH } from '../../lib/domain/passwords.js';
import { newPassword } from '../../lib/store/accounts.js';

const rules = { minLength: 10, email: 'Grace.Hopper@example.com' };

t.equal(COMMON_PASSWORDS, 10_000, 'the list holds the 10,000 most common passwords');
t.equal(passwordProblem('a fine passphrase', rules), null);
t.match(passwordProblem('short', rules), /at least 10 characters/);
t.equal(passwordProblem('äöüäöüäöüß', rules), null, 'characters, not bytes: ten umlauts are ten');
t.match(passwordProblem('x'.repeat(PASSWORD_MAX_LENGTH + 1), rules), /at most 1024/);
t.match(passwordProblem('1234567890', rules), /most common/);
t.match(passwordProblem('QwertyUiop', rules), /most common/, 'without case');
t.match(passwordProblem('grace.hopper@example.com', rules), /e-mail address/);
t.match(passwordProblem('Grace.Hopper', { ...rules, minLength: 8 }), /e-mail address/, 'nor the part before the @');
t.equal(passwordProblem('grace.hopper', { minLength: 8 }), null, 'no address given: not checked');
for (let i = 0; i < 50; i++) t.equal(passwordProblem(newPassword(), rules), null, 'a generated password passes');

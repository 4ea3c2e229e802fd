// Sorting and grouping instances (lib/store/instance-order.ts).
import t from 'tap';
import { instanceOrderBy, groupInstances } from '../../lib/store/instance-order.js';

t.test('instance order: known keys only, descending, group first', async (t) => {
  // machine and software are never null: no NULLS clause, so the (customer, machine, software, id) index serves it.
  t.equal(instanceOrderBy(undefined, undefined), 'ORDER BY x.machine ASC, x.software ASC, x.id ASC');
  t.match(instanceOrderBy('group,-sort_priority', 'group'), /^ORDER BY min\(x.group_priority\) OVER \(PARTITION BY x.group_name\) ASC NULLS LAST, x.group_name ASC NULLS LAST, x.group_name ASC NULLS LAST, x.sort_priority DESC NULLS LAST/);
  t.notMatch(instanceOrderBy('machine;DROP TABLE x', undefined), /DROP/);
  const groups = groupInstances([{ group: 'a' }, { group: 'a' }, { group: null }], 'group');
  t.same(groups.map((g) => [g.key, g.count]), [['a', 2], [null, 1]]);
});

// The software patterns of timeout rules and maintenance windows: a glob where `*` matches any run
// of characters (none too) and everything else itself, case-sensitive (docs/api.md "Timeout rules",
// "Maintenance windows"). One definition for both, so a pattern means the same in each.

/** The glob as SQL LIKE (escape `\`). */
export function globToLike(pattern: string): string {
  return pattern.replace(/[\\%_]/g, (c) => `\\${c}`).replace(/\*/g, '%');
}

/** The same glob as a RegExp (tests, and the dashboard's preview). */
export function globToRegExp(pattern: string): RegExp {
  return new RegExp(`^${pattern.split('*').map((p) => p.replace(/[.*+?^${}()|[\]\\]/g, '\\$&')).join('.*')}$`, 's');
}

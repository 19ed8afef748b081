// Validates objects against CRD openAPIV3Schemas with ajv (a real JSON-schema validator), the way
// the API server does the parts that JSON Schema covers: types, enums, patterns, bounds,
// required, oneOf, formats, and defaulting (useDefaults applies `default` like the server).
// Kubernetes extensions get their meaning here too: x-kubernetes-list-type set/map (uniqueness);
// the other x-kubernetes-* keywords are accepted so that strict mode still catches typos in every
// standard keyword of the schemas.
//
// stdin:  {"schemas": {"NAME": openAPIV3Schema, ...},
//          "cases": [{"id": "...", "schema": "NAME", "object": {...}}, ...]}
// stdout: {"ID": {"valid": bool, "errors": ["..."], "object": defaulted-object}, ...}
'use strict';
const path = require('path');
const fs = require('fs');

const root = path.resolve(__dirname, '..', '..');
const Ajv = require(path.join(root, '.deps', 'node_modules', 'ajv'));

const ajv = new Ajv({ allErrors: true, strict: true, strictTypes: false, strictRequired: false, useDefaults: true });
ajv.addVocabulary([
  'x-kubernetes-preserve-unknown-fields', 'x-kubernetes-int-or-string',
  'x-kubernetes-map-type', 'x-kubernetes-embedded-resource', 'x-kubernetes-validations',
  'x-kubernetes-list-map-keys',
]);
ajv.addKeyword({
  keyword: 'x-kubernetes-list-type',
  type: 'array',
  schemaType: 'string',
  errors: true,
  validate: function listType(kind, data, parentSchema) {
    if (kind === 'atomic') return true;
    const seen = new Set();
    for (const item of data) {
      let key;
      if (kind === 'set') key = JSON.stringify(item);
      else key = JSON.stringify((parentSchema['x-kubernetes-list-map-keys'] || []).map(k => item[k]));
      if (seen.has(key)) {
        listType.errors = [{ keyword: 'x-kubernetes-list-type', message: `duplicate ${kind} entry ${key}`, params: {} }];
        return false;
      }
      seen.add(key);
    }
    return true;
  },
});
ajv.addFormat('int32', { type: 'number', validate: x => Number.isInteger(x) && x >= -(2 ** 31) && x < 2 ** 31 });
ajv.addFormat('int64', { type: 'number', validate: x => Number.isInteger(x) });
ajv.addFormat('date-time', /^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?(Z|[+-]\d\d:\d\d)$/);

const job = JSON.parse(fs.readFileSync(0, 'utf8'));
const validators = {};
const out = {};
for (const [name, schema] of Object.entries(job.schemas)) {
  try {
    validators[name] = ajv.compile(schema);
  } catch (e) {
    out['schema:' + name] = { valid: false, errors: ['schema does not compile: ' + e.message] };
  }
}
for (const c of job.cases) {
  const v = validators[c.schema];
  if (!v) {
    out[c.id] = { valid: false, errors: ['no compiled schema ' + c.schema] };
    continue;
  }
  const obj = JSON.parse(JSON.stringify(c.object));
  const valid = v(obj);
  out[c.id] = {
    valid,
    errors: (v.errors || []).map(e => `${e.instancePath || '/'} ${e.message}` +
      (e.params && e.params.allowedValues ? ` (${e.params.allowedValues.join(', ')})` : '')),
    object: obj,
  };
}
process.stdout.write(JSON.stringify(out));

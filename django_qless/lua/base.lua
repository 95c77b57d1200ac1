-- base.lua: the shared local table Q and the helpers every command uses.
--
-- Commands: none (helpers only).
-- Helpers: key builders, argument validation (numbers, names, JSON), config reads, job hash
-- reads, history append, event payloads, the wake-up channel; module loaders `objects` (job
-- objects, history read) and `stats` (wait/run statistics). Every other file wraps its code
-- in loaders (`Q.mod.<name> = function() ... end`) that api.lua runs per command, because
-- each EVALSHA re-runs the whole script body and creating closures costs CPU.
--
-- Keys read or written here:
--   ql:config                      hash  config option -> value (HMGET/HGET); also the hidden
--                                        '#' bookkeeping fields (#due:<queue>, HGET/HSET)
--   ql:j:<jid>                     hash  job record (HMGET; field `history` = compact first visit
--                                        in qless-core's legacy format, HDEL on migration)
--   ql:j:<jid>-history             list  JSON history entries (RPUSH, LRANGE, LSET/LREM/LPOP/LTRIM/LPUSH)
--   ql:j:<jid>-dependents          set   (SMEMBERS, for job objects)
--   ql:j:<jid>-dependencies        set   (SMEMBERS, for job objects)
--   ql:tracked                     zset  tracked jids (ZSCORE, for `get`; hot paths read the
--                                        job hash field `tracked` that mirrors it)
--   ql:s:wait:<day>:<queue>        hash  wait statistics (HMGET + HSET once per call)
--   ql:s:run:<day>:<queue>         hash  run statistics (HMGET + HSET once per call)
--   ql:s:stats:<day>:<queue>       hash  failures/failed/retries counters (HINCRBY)
--   ql:wake:<queue>                channel  queue name, published once per call per queue
--   ql:log, ql:w:<worker>, ql:<event>  channels (PUBLISH)

local Q = {}
local rcall = redis.call
local cjson_encode = cjson.encode
local cjson_decode = cjson.decode
local floor = math.floor
local tinsert = table.insert
local tconcat = table.concat
Q.rcall = rcall
Q.encode = cjson_encode
Q.decode = cjson_decode

Q.DEFAULTS = {
  ['application'] = 'qless',
  ['heartbeat'] = 60,
  ['grace-period'] = 10,
  ['stats-history'] = 30,
  ['histogram-history'] = 7,
  ['jobs-history-count'] = 50000,
  ['jobs-history'] = 604800,
}
-- Options read with an in-code fallback but not listed by config.get.
Q.FALLBACKS = { ['max-worker-age'] = 86400, ['max-job-history'] = 100 }
Q.commands = {}
Q.MAX_LIST = 1000
-- Module loaders: every EVALSHA runs the whole script body, and creating a closure costs
-- time, so each file wraps its functions in a loader that api.lua runs only for the
-- commands that need it (see ROUTES there). As a Redis 7 function each loader runs once.
Q.mod = {}
-- Module lists already loaded: as a Redis 7 function the script body runs once per server, so
-- after the first call of each command this is one table lookup.
local ready = {}
function Q.need(names)
  if ready[names] then return end
  ready[names] = true
  for name in names:gmatch('[^,]+') do
    local loader = Q.mod[name]
    if loader then
      Q.mod[name] = false
      loader()
    end
  end
end
Q.CHUNK = 500
Q.MAX_DATA = 1048576
Q.MAX_MESSAGE = 65536

-- Per-call state, reset by the dispatcher (api.lua).
function Q.reset(op)
  Q.op = op
  Q.cfgv = nil
  Q.woken = {}
  Q.woken_list = {}
  Q.stats_acc = {}
  Q.stats_order = {}
end

-- ---------------------------------------------------------------- keys

function Q.kjob(jid) return 'ql:j:' .. jid end
function Q.khist(jid) return 'ql:j:' .. jid .. '-history' end
function Q.kdeps(jid) return 'ql:j:' .. jid .. '-dependencies' end
function Q.kdents(jid) return 'ql:j:' .. jid .. '-dependents' end
function Q.kq(queue, kind) return 'ql:q:' .. queue .. '-' .. kind end
function Q.kwjobs(worker) return 'ql:w:' .. worker .. ':jobs' end
function Q.bin(t) return floor(t - (t % 86400)) end
function Q.score(priority, now) return priority - now / 10000000000 end

-- ---------------------------------------------------------------- validation

-- Raise `<Op>(): text`; level 1 keeps the `user_script:N:` prefix clients strip.
function Q.fail(text)
  error(Q.op .. '(): ' .. text)
end

-- True when s is plain decimal text: optional sign, digits with an optional fraction,
-- optional exponent. Rejects hex, spaces, nan, inf.
local function is_decimal(s)
  if type(s) ~= 'string' then return false end
  if s:find('^%-?%d+$') then return true end  -- plain integers (most arguments): one scan
  local body = s:match('^[-+]?(.*)$')
  local mant, exp = body:match('^([%d%.]+)[eE]([-+]?%d+)$')
  if not mant then mant = body end
  if not mant:match('^%d*%.?%d*$') or not mant:match('%d') then return false end
  return true
end
Q.is_decimal = is_decimal

-- Parse a number argument; `msg` is the qless wording ("not a number" by default).
function Q.number(name, v, msg)
  local n = is_decimal(v) and tonumber(v) or nil
  if n == nil then
    Q.fail('Arg "' .. name .. '" ' .. (msg or 'not a number') .. ': ' .. tostring(v))
  end
  if n ~= n or n == math.huge or n == -math.huge then
    Q.fail('Arg "' .. name .. '" must be finite: ' .. tostring(v))
  end
  return n
end

-- Parse an integer argument in [lo, hi] (hi may be nil); `range` names the rule in the error.
function Q.integer(name, v, lo, hi, msg)
  local n = Q.number(name, v, msg)
  if n ~= floor(n) or (lo and n < lo) or (hi and n > hi) then
    if hi then
      Q.fail('Arg "' .. name .. '" must be an integer in [' .. lo .. ', ' .. hi .. ']: ' .. tostring(v))
    elseif lo == 0 then
      Q.fail('Arg "' .. name .. '" must be a non-negative integer: ' .. tostring(v))
    else
      Q.fail('Arg "' .. name .. '" must be an integer >= ' .. lo .. ': ' .. tostring(v))
    end
  end
  return n
end

-- Optional integer argument with a default when nil or empty.
function Q.opt_integer(name, v, default, lo, hi, msg)
  if v == nil or v == '' then return default end
  return Q.integer(name, v, lo, hi, msg)
end

function Q.priority(v, msg)
  return Q.integer('priority', v, -2147483648, 2147483647, msg)
end

function Q.delay(v, msg)
  local d = Q.number('delay', v, msg)
  if d < 0 then Q.fail('Arg "delay" must be >= 0: ' .. tostring(v)) end
  if d > 315360000 then Q.fail('Arg "delay" must be at most 315360000: ' .. tostring(v)) end
  return d
end

function Q.count(v, lo, hi, default, msg)
  if v == nil and default ~= nil then return default end
  local n = Q.number('count', v, msg or 'missing or not a number')
  if n ~= floor(n) or n < lo or n > hi then
    Q.fail('Arg "count" must be an integer in [' .. lo .. ', ' .. hi .. ']: ' .. tostring(v))
  end
  return n
end

function Q.offset(name, v, msg)
  if v == nil or v == '' then return 0 end
  return Q.integer(name, v, 0, nil, msg)
end

local function printable(s)
  return not s:find('[%z\1-\31\127]')
end
Q.printable = printable

function Q.jid(v, name, maxlen)
  name = name or 'jid'
  if v == nil or v == '' then Q.fail('Arg "' .. name .. '" missing') end
  local reason
  if #v > (maxlen or 64) then
    reason = 'longer than ' .. (maxlen or 64) .. ' characters'
  elseif not v:match('^[%w_%.%-]+$') then
    reason = 'only letters, digits, "_", "." and "-" are allowed'
  elseif v:find('-', 1, true) and (v:match('%-history$') or v:match('%-dependents$')
      or v:match('%-dependencies$')) then
    reason = 'must not end in -history, -dependents or -dependencies'
  end
  if reason then Q.fail('Arg "' .. name .. '" invalid: ' .. v .. ' (' .. reason .. ')') end
  return v
end

function Q.queue(v, name)
  name = name or 'queue'
  if v == nil or v == '' then Q.fail('Arg "' .. name .. '" missing') end
  if #v > 64 or not v:match('^[%w_%.%-]+$') then
    Q.fail('Arg "' .. name .. '" invalid: ' .. v)
  end
  return v
end

function Q.worker(v, missing_op)
  if v == nil or v == '' then
    if missing_op then error(missing_op .. '(): Arg "worker" missing') end
    Q.fail('Arg "worker" missing')
  end
  if #v > 128 or not v:match('^[\33-\57\59-\126]+$') then
    Q.fail('Arg "worker" invalid: ' .. v)
  end
  return v
end

function Q.klass(v)
  if v == nil or v == '' then Q.fail('Arg "klass" missing') end
  if #v > 256 or not printable(v) then Q.fail('Arg "klass" invalid') end
  return v
end

function Q.group(v)
  if v == nil or v == '' then Q.fail('Arg "group" missing') end
  if #v > 256 then Q.fail('Arg "group" invalid: longer than 256 characters') end
  return v
end

function Q.message(v, required)
  if v == nil or (required and v == '') then Q.fail('Arg "message" missing') end
  if #v > Q.MAX_MESSAGE then v = v:sub(1, Q.MAX_MESSAGE) .. ' [truncated]' end
  return v
end

-- Decode JSON text; on failure raise `Arg "<name>" not JSON: <cjson's message>`.
function Q.json(name, v)
  if v == nil then Q.fail('Arg "' .. name .. '" missing') end
  local ok, value = pcall(cjson_decode, v)
  if not ok then Q.fail('Arg "' .. name .. '" not JSON: ' .. tostring(value)) end
  return value
end

-- Job data: a JSON object of at most 1 MiB; the caller stores the text verbatim.
function Q.data(v, name)
  name = name or 'data'
  if v == nil then Q.fail('Arg "' .. name .. '" missing') end
  if #v > Q.MAX_DATA then Q.fail('Arg "' .. name .. '" too large') end
  local value = Q.json(name, v)
  if type(value) ~= 'table' or not v:match('^%s*{') then
    Q.fail('Arg "' .. name .. '" must be a JSON object')
  end
  return v
end

-- A JSON array argument (tags, depends, throttles): returns a Lua list.
local function json_list(name, v, maxn)
  local value = Q.json(name, v)
  -- `{}` is accepted as the empty list (cjson's own encoding of one).
  if type(value) ~= 'table' or (next(value) ~= nil and (#value == 0 or v:match('^%s*{'))) then
    Q.fail('Arg "' .. name .. '" must be a JSON array')
  end
  if #value > maxn then Q.fail('Arg "' .. name .. '" has more than ' .. maxn .. ' entries') end
  return value
end

function Q.tag_name(t)
  if type(t) ~= 'string' or #t < 1 or #t > 64 or not printable(t) then
    Q.fail('Arg "tags" invalid tag: ' .. tostring(t))
  end
  return t
end

function Q.tags(v)
  if v == '[]' then return {} end  -- the common case: no decoding needed
  local list = json_list('tags', v, 50)
  local out, seen = {}, {}
  for _, t in ipairs(list) do
    Q.tag_name(t)
    if not seen[t] then seen[t] = true; tinsert(out, t) end
  end
  return out
end

function Q.depends(v, self_jid)
  if v == '[]' then return {} end  -- the common case: no decoding needed
  local list = json_list('depends', v, Q.MAX_LIST)
  local out, seen = {}, {}
  for _, d in ipairs(list) do
    if type(d) ~= 'string' then Q.fail('Arg "depends" must be a list of jids') end
    Q.jid(d, 'depends')
    if d == self_jid then Q.fail('Arg "depends" invalid: a job cannot depend on itself') end
    if not seen[d] then seen[d] = true; tinsert(out, d) end
  end
  return out
end

-- Refuse edges jid -> d that would close a cycle: some d already (transitively) depends on
-- jid. Read-only, so callers run it with the other checks before their first write. Only a
-- job that others wait for can be on a cycle, so most calls cost one EXISTS (skipped when
-- the caller knows `waited_on`). `edges(cur)` lists cur's dependencies (default: stored).
function Q.check_cycle(jid, deps, edges, waited_on)
  if #deps == 0 then return end
  if not waited_on and rcall('EXISTS', Q.kdents(jid)) == 0 then return end
  local seen, stack, visited = {}, {}, 0
  for i = #deps, 1, -1 do stack[#stack + 1] = deps[i] end
  while #stack > 0 do
    local cur = table.remove(stack)
    if cur == jid then
      Q.fail('Arg "depends" invalid: dependency cycle: ' .. jid .. ' would wait for itself')
    end
    if not seen[cur] then
      seen[cur] = true
      visited = visited + 1
      if visited > Q.MAX_LIST then
        Q.fail('Arg "depends" invalid: more than ' .. Q.MAX_LIST
          .. ' jobs to check for a dependency cycle')
      end
      local next_deps = edges and edges(cur) or rcall('SMEMBERS', Q.kdeps(cur))
      for _, x in ipairs(next_deps) do stack[#stack + 1] = x end
    end
  end
end

function Q.throttle_id(t, name)
  if type(t) ~= 'string' or #t < 1 or #t > 128 or not t:match('^[\33-\126]+$') then
    Q.fail('Arg "' .. (name or 'throttles') .. '" invalid throttle id: ' .. tostring(t))
  end
  return t
end

function Q.throttles(v)
  local list = json_list('throttles', v, 10)
  local out, seen = {}, {}
  for _, t in ipairs(list) do
    Q.throttle_id(t)
    if not seen[t] then seen[t] = true; tinsert(out, t) end
  end
  return out
end

-- A list of jids given as separate arguments, at most 1000.
function Q.jid_args(args, first, allow_empty)
  local out = {}
  for i = first, #args do tinsert(out, Q.jid(args[i])) end
  if #out == 0 and not allow_empty then Q.fail('Arg "jid" missing') end
  if #out > Q.MAX_LIST then Q.fail('at most ' .. Q.MAX_LIST .. ' jids') end
  return out
end

-- Trailing name/value pairs -> table; raises on an odd count.
function Q.pairs_args(args, first)
  local n = #args - first + 1
  if n > 0 and n % 2 == 1 then Q.fail('Odd number of additional args') end
  local out = {}
  for i = first, #args, 2 do out[args[i]] = args[i + 1] end
  return out
end

-- ---------------------------------------------------------------- config

-- Read the named config fields with one HMGET for the whole call.
function Q.load_config(names)
  local values = rcall('HMGET', 'ql:config', unpack(names))
  Q.cfgv = Q.cfgv or {}
  for i, name in ipairs(names) do Q.cfgv[name] = values[i] or false end
end

-- A config value (string from ql:config, else the default), read lazily if not loaded.
function Q.cfg(name)
  local cache = Q.cfgv
  if not cache or cache[name] == nil then
    Q.cfgv = cache or {}
    Q.cfgv[name] = rcall('HGET', 'ql:config', name) or false
  end
  local v = Q.cfgv[name]
  if v == false then return Q.DEFAULTS[name] or Q.FALLBACKS[name] end
  return v
end

function Q.cfgnum(name, fallback)
  local v = tonumber(Q.cfg(name))
  if v == nil or v ~= v then return fallback end
  return v
end

-- Lock duration for a queue: <queue>-heartbeat, else heartbeat, else 60.
function Q.heartbeat(queue)
  local v = tonumber(Q.cfg(queue .. '-heartbeat'))
  if v == nil then v = Q.cfgnum('heartbeat', 60) end
  return v
end

-- ---------------------------------------------------------------- job hash

-- HMGET the named fields of a job; returns nil when the job has no hash.
function Q.read(jid, fields)
  local values = rcall('HMGET', 'ql:j:' .. jid, unpack(fields))
  local job, any = {}, false
  for i, name in ipairs(fields) do
    local v = values[i]
    if v then job[name] = v; any = true end
  end
  if not any then return nil end
  return job
end

Q.ALL = { 'jid', 'klass', 'state', 'queue', 'worker', 'priority', 'expires', 'retries',
  'remaining', 'data', 'tags', 'failure', 'spawned_from_jid', 'throttles', 'history' }
-- The job hash field `tracked` ('1') mirrors membership of ql:tracked so the hot paths learn
-- it from the HMGET they already do.

function Q.tracked(jid)
  return rcall('ZSCORE', 'ql:tracked', jid) ~= false
end

-- Internal bookkeeping lives in ql:config under field names starting with '#' (hidden from
-- config.get, refused by config.set/unset), so the config HMGET a command already does reads
-- it for free:
--   #throttle:<queue>   '1'/'0': the queue throttle ql:th:ql:q:<queue> is/is not configured
--   #due:<queue>        lower bound of every lock expiry, scheduled time and spawn time of the
--                       queue, at most HORIZON ahead of the pop that set it: pop skips those
--                       three scans before it
--   #completed-due      time before which no completed job can be older than jobs-history
--                       (at most HORIZON ahead): complete skips the age-based retention
--                       query until then
function Q.mfield(kind, queue) return '#' .. kind .. ':' .. queue end
-- `#due` is never set further ahead than this (seconds), so timers written by another writer
-- (qless-core during a rolling switch, a restore, a repair script) are seen within it.
Q.HORIZON = 1

-- Raw stored config value (false if unset), without defaults.
function Q.cfgraw(name)
  Q.cfg(name)
  return Q.cfgv[name]
end

-- A lock, schedule or spawn time `at` was written: keep `#due` a lower bound.
function Q.lower_due(queue, at)
  local field = Q.mfield('due', queue)
  local cur = tonumber(rcall('HGET', 'ql:config', field))
  if cur and at < cur then rcall('HSET', 'ql:config', field, at) end
  if Q.cfgv then Q.cfgv[field] = nil end
end

-- Decode a stored JSON list (tags/throttles); tolerate the {} quirk and garbage.
function Q.list(text)
  if not text or text == '' then return {} end
  local ok, v = pcall(cjson_decode, text)
  if ok and type(v) == 'table' then return v end
  return {}
end

-- ---------------------------------------------------------------- history

local function history_entry(when, what, extra)
  if extra then return cjson_encode({ floor(when), what, extra }) end
  return cjson_encode({ floor(when), what })
end

-- Compact history. A job's first visit (put, popped, done) lives in the job hash field
-- `history`, in qless-core's own legacy encoding: a JSON array of visit objects with `q`,
-- `put`, `popped`, `worker`, `failed`, `done` timestamps. qless-core (and this engine) expand
-- that field into list entries and delete it on first touch, so the field plus the list always
-- read as the list alone would. The engine writes it only for a job's first event, extends it
-- for the first pop and the completion, and migrates on any other event.

-- The list entries a legacy `history` field stands for (after whatever the list holds).
local function legacy_entries(legacy)
  -- Fast path for the engine's own shapes (a bare first put, or put + popped): the entries
  -- are spliced from the field's text, which holds the very number and string texts cjson
  -- writes; anything unusual (leading zeros, other keys, non-canonical escapes) goes the
  -- generic way below.
  local q, put, rest = legacy:match('^%[{"q":"([%w_%.%-]*)","put":([1-9]%d*)(.*)$')
  if q and #put <= 14 then
    local first = '[' .. put .. ',"put",{"q":"' .. q .. '"}]'
    if rest == '}]' then return { first } end
    local popped, wtext = rest:match('^,"popped":([1-9]%d*),"worker":(".*")}%]$')
    if popped and #popped <= 14 then
      local ok, w = pcall(cjson_decode, wtext)
      if ok and type(w) == 'string' and cjson_encode(w) == wtext then
        return { first, '[' .. popped .. ',"popped",{"worker":' .. wtext .. '}]' }
      end
    end
  end
  local entries = {}
  local ok, old = pcall(cjson_decode, legacy)
  if not ok or type(old) ~= 'table' then return entries end
  for _, h in ipairs(old) do
    if type(h) == 'table' then
      if h.put then tinsert(entries, history_entry(h.put, 'put', { q = h.q })) end
      if h.popped then tinsert(entries, history_entry(h.popped, 'popped', { worker = h.worker })) end
      if h.failed then tinsert(entries, history_entry(h.failed, 'failed', { worker = h.worker })) end
      if h.done then tinsert(entries, history_entry(h.done, 'done')) end
    end
  end
  return entries
end
Q.legacy_entries = legacy_entries

-- Redis keeps a small hash in its compact encoding (listpack/ziplist) only while every value
-- is at most `hash-max-listpack-value` bytes (default 64); one longer value converts the job
-- hash to a real hash table for good, which costs far more than a history list. So the field
-- only grows past this length when the hash already holds a longer value (`roomy`).
Q.SMALL_VALUE = 64

-- True when one of the given field values is longer than Q.SMALL_VALUE.
function Q.roomy(...)
  for i = 1, select('#', ...) do
    local v = select(i, ...)
    if type(v) == 'string' and #v > Q.SMALL_VALUE then return true end
  end
  return false
end

-- Field text of a first visit that starts with a put (floor(when), as list entries use), or
-- nil when it would not fit.
function Q.compact_put(queue, when, roomy)
  local text = '[{"q":' .. cjson_encode(queue) .. ',"put":' .. cjson_encode(floor(when)) .. '}]'
  if #text > Q.SMALL_VALUE and not roomy then return nil end
  return text
end

-- The field with the first pop added and {put time, queue, pop time, worker}, or nil when
-- the field is not a bare first put.
function Q.compact_popped(legacy, when, worker, roomy)
  local queue, put = legacy:match('^%[{"q":"([%w_%.%-]*)","put":(%d+)}%]$')
  local at = floor(when)
  -- (cjson writes 14 significant digits: larger times take the generic path)
  if not queue or at >= 1e14 then return nil end
  local text = legacy:sub(1, -3) .. ',"popped":' .. cjson_encode(at) .. ',"worker":'
    .. cjson_encode(worker) .. '}]'
  if #text > Q.SMALL_VALUE and not roomy then return nil end
  return text, { tonumber(put), queue, at, worker }
end

-- The field with the completion added, or nil unless it is a first put + pop by `worker`.
function Q.compact_done(legacy, when, worker, roomy)
  local head = legacy:match('^%[{"q":"[%w_%.%-]*","put":%d+,"popped":%d+')
  if not head then return nil end
  local tail = ',"worker":' .. cjson_encode(worker) .. '}]'
  if #head + #tail ~= #legacy or legacy:sub(#head + 1) ~= tail then return nil end
  local text = legacy:sub(1, -3) .. ',"done":' .. cjson_encode(floor(when)) .. '}]'
  if #text > Q.SMALL_VALUE and not roomy then return nil end
  return text
end

-- The `time` field text: 14 significant digits when that reads back as the same number,
-- else 17 (always exact); qless-core reads it with tonumber.
function Q.ftime(t)
  local text = tostring(t)
  if tonumber(text) ~= t then text = string.format('%.17g', t) end
  return text
end

-- Push entries in chunks; returns the list length.
local function push_entries(key, entries)
  local len = 0
  for i = 1, #entries, Q.CHUNK do
    len = rcall('RPUSH', key, unpack(entries, i, math.min(i + Q.CHUNK - 1, #entries)))
  end
  return len
end

-- Expand a legacy single-field `history` array into list entries and drop the field.
function Q.migrate_history(jid, legacy)
  rcall('HDEL', 'ql:j:' .. jid, 'history')
  push_entries(Q.khist(jid), legacy_entries(legacy))
end

-- Append a history entry (after migrating `legacy`, the job's `history` field, if given, in
-- the same RPUSH); trim to max-job-history (keep the first entry and the last n-1).
-- `overwrite`: the caller's own HSET replaces the field with `[]` (an empty legacy history,
-- which every reader expands to nothing) instead of an HDEL here.
-- Returns the pushed entries when they are now the whole list (it was empty), else nil.
function Q.history(jid, when, what, extra, legacy, overwrite)
  local key = Q.khist(jid)
  local len
  local entries
  if legacy == '[]' then legacy = nil end
  if legacy then
    if not overwrite then rcall('HDEL', 'ql:j:' .. jid, 'history') end
    entries = legacy_entries(legacy)
    tinsert(entries, history_entry(when, what, extra))
    len = push_entries(key, entries)
  else
    entries = { history_entry(when, what, extra) }
    len = rcall('RPUSH', key, entries[1])
  end
  -- The cap is 0 (none) or >= 3, so a list of 3 or fewer entries never needs a trim.
  if len <= 3 then
    if len == #entries then return entries end
    return nil
  end
  local n = Q.cfgnum('max-job-history', 100)
  if n < 3 or len <= n then return end
  if len == n + 1 then
    rcall('LSET', key, 1, '__qless_trim__')
    rcall('LREM', key, 1, '__qless_trim__')
  else
    local first = rcall('LPOP', key)
    rcall('LTRIM', key, -(n - 1), -1)
    rcall('LPUSH', key, first)
  end
end

function Q.counter(queue, when, field, delta)
  rcall('HINCRBY', 'ql:s:stats:' .. Q.bin(when) .. ':' .. queue, field, delta)
end

-- Fail a job whose retries are exhausted (retry and lock loss); `fields` are more hash
-- fields to write, `legacy` the job's `history` field (migrated).
function Q.exhausted(jid, queue, now, group, message, worker, fields, legacy)
  Q.history(jid, now, 'failed', { group = group }, legacy)
  table.insert(fields, 'state'); table.insert(fields, 'failed')
  table.insert(fields, 'worker'); table.insert(fields, '')
  table.insert(fields, 'expires'); table.insert(fields, '')
  table.insert(fields, 'failure')
  table.insert(fields, cjson_encode({ group = group, message = message,
    when = worker ~= '' and floor(now) or now, worker = worker }))
  rcall('HSET', Q.kjob(jid), unpack(fields))
  rcall('SADD', 'ql:failures', group)
  rcall('LPUSH', 'ql:f:' .. group, jid)
  Q.counter(queue, now, 'failures', 1)
  Q.counter(queue, now, 'failed', 1)
end

-- ---------------------------------------------------------------- attempt tokens

-- An attempt token (optional, caller-chosen per pop): 1-64 of [A-Za-z0-9_-]; '' means none.
function Q.token(v)
  if v == nil or v == '' then return nil end
  if #v > 64 or v:find('[^%w_%-]') then
    Q.fail('Arg "token" must be 1-64 characters of A-Z a-z 0-9 _ -: ' .. v:sub(1, 80))
  end
  return v
end

-- The result recorded in the job's `done` field (token .. ' ' .. result) for this token, if
-- any: a call repeated after a lost reply returns it instead of acting (or failing) again.
function Q.recorded(h, token)
  if not token or not h.done then return nil end
  local n = #token
  if h.done:sub(1, n + 1) == token .. ' ' then return h.done:sub(n + 2) end
  return nil
end

-- ---------------------------------------------------------------- events

-- JSON text of a string (or false), escaped exactly as cjson does it.
local function js(v)
  if v == false or v == nil then return 'false' end
  return cjson_encode(v)
end
Q.js = js

function Q.publish(channel, payload)
  rcall('PUBLISH', channel, payload)
end

function Q.ev_put(jid, queue)
  return '{"jid":' .. js(jid) .. ',"event":"put","queue":' .. js(queue) .. '}'
end

function Q.ev_lock_lost(jid, worker)
  return '{"jid":' .. js(jid) .. ',"event":"lock_lost","worker":' .. js(worker) .. '}'
end

function Q.ev_failed(jid, worker, group, message)
  return '{"message":' .. js(message) .. ',"jid":' .. js(jid) .. ',"group":' .. js(group)
    .. ',"event":"failed","worker":' .. js(worker) .. '}'
end

-- Tell the old owner and the log that a job's lock is gone.
function Q.lock_lost(jid, worker)
  local payload = Q.ev_lock_lost(jid, worker)
  rcall('PUBLISH', 'ql:w:' .. worker, payload)
  rcall('PUBLISH', 'ql:log', payload)
end

-- Note that jobs became ready in a queue; published once per call (Q.flush_wake).
function Q.wake(queue)
  if not Q.woken[queue] then
    Q.woken[queue] = true
    tinsert(Q.woken_list, queue)
  end
end

function Q.flush_wake()
  for _, queue in ipairs(Q.woken_list) do rcall('PUBLISH', 'ql:wake:' .. queue, queue) end
  Q.woken = {}
  Q.woken_list = {}
end

-- ---------------------------------------------------------------- tags index

-- Add/remove a job's membership in ql:t:<tag> and keep ql:tags counts honest.
function Q.tag_add(jid, tag, now)
  rcall('ZADD', 'ql:t:' .. tag, now, jid)
  rcall('ZINCRBY', 'ql:tags', 1, tag)
end

function Q.tag_remove(jid, tag)
  rcall('ZREM', 'ql:t:' .. tag, jid)
  if tonumber(rcall('ZINCRBY', 'ql:tags', -1, tag)) <= 0 then rcall('ZREM', 'ql:tags', tag) end
end

-- Release a list in chunks with a command taking many members (ZREM, SREM, DEL...).
function Q.chunked(cmd, key, list)
  for i = 1, #list, Q.CHUNK do
    rcall(cmd, key, unpack(list, i, math.min(i + Q.CHUNK - 1, #list)))
  end
end

-- ---------------------------------------------------------------- job objects (module)

Q.mod.objects = function()
  -- History objects of the list followed by the legacy field's entries. `compact`
  -- ({put time, queue, pop time, worker}, from a pop that just extended a bare first put)
  -- means there is no list to read: the two objects are built as the list form decodes them.
  function Q.read_history(jid, legacy, compact, listed)
    if compact then
      local put = { when = compact[1], what = 'put' }
      put.q = compact[2]
      local popped = { when = compact[3], what = 'popped' }
      popped.worker = compact[4]
      return { put, popped }
    end
    local out = {}
    -- `listed`: the list's whole content, known from the RPUSH that created it.
    local raws = listed or rcall('LRANGE', Q.khist(jid), 0, -1)
    if legacy then
      for _, e in ipairs(Q.legacy_entries(legacy)) do tinsert(raws, e) end
    end
    for _, raw in ipairs(raws) do
      local ok, e = pcall(cjson_decode, raw)
      if ok and type(e) == 'table' then
        if e[2] ~= nil then
          local obj = { when = e[1], what = e[2] }
          if type(e[3]) == 'table' then
            for k, v in pairs(e[3]) do obj[k] = v end
          end
          tinsert(out, obj)
        else
          tinsert(out, e)
        end
      end
    end
    return out
  end


  -- Build the JSON-ready job object from a hash read with Q.ALL (lean: no history/deps).
  -- Reads never migrate a legacy/compact `history` field: they expand it after the list.
  function Q.job_object(jid, h, tracked, lean)
    local failure = {}
    if h.failure and h.failure ~= '' then
      local ok, f = pcall(cjson_decode, h.failure)
      if ok and type(f) == 'table' then failure = f end
    end
    local remaining = tonumber(h.remaining) or 0
    local obj = {
      jid = jid,
      klass = h.klass or '',
      state = h.state or '',
      queue = h.queue or '',
      worker = h.worker or '',
      tracked = tracked,
      priority = tonumber(h.priority) or 0,
      expires = tonumber(h.expires) or 0,
      retries = tonumber(h.retries) or 0,
      remaining = floor(remaining),
      data = h.data or '{}',
      tags = Q.list(h.tags),
      failure = failure,
      spawned_from_jid = h.spawned_from_jid or false,
      throttles = Q.list(h.throttles),
    }
    if not lean then
      obj.history = Q.read_history(jid, h.history, h.compact, h.listed)
      -- Most jobs have neither set: one EXISTS instead of two SMEMBERS.
      local empty = {}
      obj.dependents, obj.dependencies = empty, empty
      if rcall('EXISTS', Q.kdents(jid), Q.kdeps(jid)) > 0 then
        obj.dependents = rcall('SMEMBERS', Q.kdents(jid))
        obj.dependencies = rcall('SMEMBERS', Q.kdeps(jid))
      end
    end
    return obj
  end

  -- Full job object for a jid, or nil.
  function Q.get(jid)
    local h = Q.read(jid, Q.ALL)
    if not h then return nil end
    return Q.job_object(jid, h, Q.tracked(jid), false)
  end
end

-- ---------------------------------------------------------------- statistics (module)

Q.mod.stats = function()

  local function bucket(value)
    local v = floor(value)
    if v < 60 then return 's' .. v end
    if v < 3600 then return 'm' .. floor(v / 60) end
    if v < 86400 then return 'h' .. floor(v / 3600) end
    return 'd' .. floor(v / 86400)
  end
  Q.bucket = bucket

  -- Queue a wait/run sample; Q.flush_stats writes each stats hash once per call.
  function Q.sample(kind, queue, now, value)
    local key = 'ql:s:' .. kind .. ':' .. Q.bin(now) .. ':' .. queue
    local acc = Q.stats_acc[key]
    if not acc then
      acc = {}
      Q.stats_acc[key] = acc
      tinsert(Q.stats_order, key)
    end
    tinsert(acc, value)
  end

  function Q.flush_stats()
    for _, key in ipairs(Q.stats_order) do
      local samples = Q.stats_acc[key]
      local fields = { 'total', 'mean', 'vk' }
      local index = {}
      for _, v in ipairs(samples) do
        local b = bucket(v)
        if not index[b] then tinsert(fields, b); index[b] = #fields end
      end
      local cur = rcall('HMGET', key, unpack(fields))
      local count = tonumber(cur[1]) or 0
      local mean = tonumber(cur[2]) or 0
      local vk = tonumber(cur[3]) or 0
      local hist = {}
      for _, v in ipairs(samples) do
        count = count + 1
        if count == 1 then
          mean = v; vk = 0
        else
          local old = mean
          mean = mean + (v - mean) / count
          vk = vk + (v - mean) * (v - old)
        end
        local b = bucket(v)
        hist[b] = (hist[b] or 0) + 1
      end
      local args = { 'total', count, 'mean', mean, 'vk', vk }
      for b, i in pairs(index) do
        tinsert(args, b)
        tinsert(args, (tonumber(cur[i]) or 0) + hist[b])
      end
      rcall('HSET', key, unpack(args))
    end
    Q.stats_acc = {}
    Q.stats_order = {}
  end
end

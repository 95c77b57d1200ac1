-- base.lua: the shared local table Q and the helpers every command uses.
--
--@ helpers
--
-- Commands: none (helpers only).
-- Helpers: key builders, config reads, job hash reads, attempt tokens, the tag index, failure
-- bookkeeping. Event payloads, wake-ups and timers are in events.lua, argument validation in
-- validate.lua, history in history.lua, job objects and statistics in objects.lua and
-- samples.lua. Every other file wraps
-- its code in loaders (`Q.mod.<name> = function() ... end`) that api.lua runs per command,
-- because each EVALSHA re-runs the whole script body and creating closures costs CPU.
--
-- Keys read or written here:
--   ql:config                      hash  config option -> value (HMGET/HGET); also the hidden
--                                        '#' bookkeeping fields (#due:<queue>, HGET/HSET)
--   ql:j:<jid>                     hash  job record (HMGET)
--   ql:t:<tag>, ql:tags            zset  tag index (ZADD, ZREM, ZINCRBY)
--   ql:s:stats:<day>:<queue>       hash  failures/failed/retries counters (HINCRBY)
--   ql:failures, ql:f:<group>      set, list  failure groups (SADD, LPUSH; Q.exhausted)

local Q = {}
-- Per-call state, in one table every file sees, reset by Q.begin (run once per call by main()
-- in api.lua, the only place that resets it): as a Redis 7 function the table lives across
-- calls and is cleared, not re-allocated. The batches (woken, stats) are emptied by their
-- flush (stats in place); only a call that raised leaves them dirty, so most calls allocate
-- no new tables.
--   op           the command's name in error texts ('Put', 'Complete'...)
--   now          the call's time; now_text: the caller's text of it when kept as sent
--   cfgv         config fields read this call (Q.load_config, Q.cfg)
--   woken, woken_list       queues to wake at the end (Q.wake, Q.flush_wake)
--   stats_acc, stats_order  wait/run samples to write at the end (samples.lua)
--   worker_seen  the caller's ql:workers entry was refreshed (pop)
--   qth, due     per-queue throttle flag and `#due` bound read this call (pop, throttle)
--   timer_list, timer_at, timer_sched, timer_lock  timers written this call (Q.note_timer)
local ctx = { op = false, now = 0, now_text = nil, cfgv = nil, woken = {}, woken_list = {},
  stats_acc = {}, stats_order = {}, worker_seen = nil, qth = nil, due = nil,
  timer_list = {}, timer_at = {}, timer_sched = {}, timer_lock = {} }
Q.ctx = ctx

-- Start a call: reset the per-call state for command `op` at time `now` (`now_text`: the
-- caller's text of it, or nil) in the keyspace of `prefix`.
function Q.begin(op, now, now_text, prefix)
  if prefix ~= KP then KP, K = prefix, keyspace(prefix) end
  ctx.op, ctx.now, ctx.now_text = op, now, now_text
  ctx.cfgv, ctx.worker_seen, ctx.qth, ctx.due, ctx.rl = nil, nil, nil, nil, nil
  if ctx.woken_list[1] then
    ctx.woken = {}
    ctx.woken_list = {}
  end
  if ctx.stats_order[1] then  -- (left over only by a call that raised; a list)
    ctx.stats_acc = {}
    ctx.stats_order = {}
  end
  if ctx.timer_list[1] then
    ctx.timer_list, ctx.timer_at, ctx.timer_sched, ctx.timer_lock = {}, {}, {}, {}
  end
end
local rcall = redis.call
local cjson_encode = cjson.encode
local cjson_decode = cjson.decode
local floor = math.floor
local tinsert = table.insert
local tconcat = table.concat
-- (called as locals on the hot paths: `s:find(...)` looks the method up on every call)
local sfind, sbyte = string.find, string.byte
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
-- commands that need it (ROUTES, generated from the files' `--@` lines). As a Redis 7 function each loader runs once.
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

-- ---------------------------------------------------------------- keys

function Q.kjob(jid) return KP .. 'j:' .. jid end
function Q.khist(jid) return KP .. 'j:' .. jid .. '-history' end
function Q.kdeps(jid) return KP .. 'j:' .. jid .. '-dependencies' end
function Q.kdents(jid) return KP .. 'j:' .. jid .. '-dependents' end
function Q.kq(queue, kind) return KP .. 'q:' .. queue .. '-' .. kind end
function Q.bin(t) return floor(t - (t % 86400)) end

-- The key and config field names of a queue that every pop and complete use, built once per
-- queue of a keyspace (kept across calls as a Redis 7 function; bounded).
function Q.qn(queue)
  local names_by_queue = K.qn
  local n = names_by_queue[queue]
  if n then return n end
  if K.nq >= 256 then names_by_queue, K.nq = {}, 0; K.qn = names_by_queue end
  n = { work = KP .. 'q:' .. queue .. '-work', locks = KP .. 'q:' .. queue .. '-locks',
    heartbeat = queue .. '-heartbeat', maxc = queue .. '-max-concurrency',
    due = '#due:' .. queue, throttle = '#throttle:' .. queue, rate = '#rate:' .. queue }
  names_by_queue[queue] = n
  K.nq = K.nq + 1
  return n
end

-- ql:w:<worker>:jobs of the last worker asked in the keyspace (one worker calls at a time).
function Q.kwjobs(worker)
  local k = K
  if worker ~= k.ww then k.ww, k.wk = worker, KP .. 'w:' .. worker .. ':jobs' end
  return k.wk
end
function Q.score(priority, now) return priority - now / 10000000000 end

-- A number argument for redis.call: an integer as '%d' text, the very digits redis.call
-- would write with '%.17g' at several times the cost; any other number as is.
local sformat = string.format
function Q.int_arg(n)
  if n == 0 then return 1 / n > 0 and '0' or n end  -- ('%.17g' writes -0 as "-0")
  if n == floor(n) and n < 1e15 and n > -1e15 then return sformat('%d', n) end
  return n
end

-- A time for a ZADD score: the caller's own text of `now` when it is plain decimal (ZADD
-- parses it to the very same double, and redis.call need not format the number), else as is.
function Q.time_arg(t)
  if t == ctx.now and ctx.now_text then return ctx.now_text end
  return t
end

-- tonumber of a bookkeeping value read on every call (`#due:<queue>`, `#completed-due`): the
-- texts change about once a second, so the parsed numbers are remembered (a few at a time,
-- per keyspace: calls alternating over many shards of one server never evict each other's).
function Q.tonum(text)
  if not text then return nil end
  local k = K
  local parsed = k.parsed
  local n = parsed and parsed[text]
  if n == nil then
    if not parsed or k.nparsed >= 16 then parsed = {}; k.parsed, k.nparsed = parsed, 0 end
    n = tonumber(text) or false
    parsed[text] = n
    k.nparsed = k.nparsed + 1
  end
  return n or nil
end

-- ---------------------------------------------------------------- config

-- Read the named config fields with one HMGET for the whole call.
function Q.load_config(names)
  local values = rcall('HMGET', K.config, unpack(names))
  ctx.cfgv = ctx.cfgv or {}
  for i, name in ipairs(names) do ctx.cfgv[name] = values[i] or false end
end

-- A config value (string from ql:config, else the default), read lazily if not loaded.
function Q.cfg(name)
  local cache = ctx.cfgv
  if not cache or cache[name] == nil then
    ctx.cfgv = cache or {}
    ctx.cfgv[name] = rcall('HGET', K.config, name) or false
  end
  local v = ctx.cfgv[name]
  if v == false then return Q.DEFAULTS[name] or Q.FALLBACKS[name] end
  return v
end

-- (Q.cfgnum and Q.cfgraw read a loaded value without calling Q.cfg: a Lua function call
-- costs hundreds of instructions, and the hot path asks for a dozen values a call)
function Q.cfgnum(name, fallback)
  local cache = ctx.cfgv
  local v = cache and cache[name]
  if v == nil then
    v = Q.cfg(name)
  elseif v == false then
    v = Q.DEFAULTS[name] or Q.FALLBACKS[name]
  end
  v = tonumber(v)
  if v == nil or v ~= v then return fallback end
  return v
end

-- Lock duration for a queue: <queue>-heartbeat, else heartbeat, else 60.
function Q.heartbeat(queue)
  local v = tonumber(Q.cfgraw(Q.qn(queue).heartbeat))  -- (no per-queue default exists)
  if v == nil then v = Q.cfgnum('heartbeat', 60) end
  return v
end

-- When a lease of `seconds` from `now` ends: rounded down to 1/8 s. A queue's lock set and a
-- worker's job set hold few entries, so Redis keeps them as a listpack, whose scores are
-- text that it parses again entry by entry on every insertion (a new expiry is the largest,
-- so it passes them all). A 1/8 s time prints in at most 13 digits, which parse several
-- times cheaper than the 17 of any other time: with 100 jobs running in a queue, 29 % of
-- Redis's work per job (docs/engine.md, "Lock expiries").
function Q.lease_end(now, seconds)
  return floor((now + seconds) * 8) / 8
end

-- A running job left `queue`: with a concurrency cap, idle workers may now take another.
function Q.slot_freed(queue)
  if (tonumber(Q.cfg(Q.qn(queue).maxc)) or 0) > 0 then Q.wake(queue) end
end

-- ---------------------------------------------------------------- job hash

-- HMGET the named fields of a job; returns nil when the job has no hash.
function Q.read(jid, fields)
  local values = rcall('HMGET', KP .. 'j:' .. jid, unpack(fields))
  local job, any = {}, false
  for i, name in ipairs(fields) do
    local v = values[i]
    if v then job[name] = v; any = true end
  end
  if not any then return nil end
  return job
end

Q.ALL = { 'jid', 'klass', 'state', 'queue', 'worker', 'priority', 'expires', 'retries',
  'remaining', 'data', 'tags', 'failure', 'spawned_from_jid', 'throttles', 'history', 'visit',
  'time' }
-- The job hash field `tracked` ('1') mirrors membership of ql:tracked so the hot paths learn
-- it from the HMGET they already do.

function Q.tracked(jid)
  return rcall('ZSCORE', K.tracked, jid) ~= false
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

-- The keyspace's generation tag: the hidden config field `#marks`, written when missing (the
-- first call that needs it, or the keyspace was flushed) with a text unique to this engine
-- instance (the address of a table it keeps) and generation. Engine state kept in memory
-- across calls (queuescan.lua's known-empty marks, samples.lua's held statistics, put.lua's listed
-- queues, Q.flush_wake's queues with no idle worker) is kept under
-- the tag it was made with and counts only while ql:config still holds that tag, so a
-- FLUSHALL, FLUSHDB or a deleted ql:config ends it, and one database's state never passes
-- for another's (one Lua state serves them all).
function Q.generation()
  local tag = Q.cfgraw('#marks')
  if not tag then
    K.marks_anchor = K.marks_anchor or {}
    K.nmarks = (K.nmarks or 0) + 1
    tag = tostring(K.marks_anchor):gsub('^table: ', '') .. '/' .. K.nmarks .. '/'
      .. string.format('%.17g', ctx.now)
    rcall('HSET', K.config, '#marks', tag)
    ctx.cfgv['#marks'] = tag
  end
  return tag
end

-- Raw stored config value (false if unset), without defaults.
function Q.cfgraw(name)
  local cache = ctx.cfgv
  local v = cache and cache[name]
  if v == nil then
    Q.cfg(name)
    v = ctx.cfgv[name]
  end
  return v
end

-- A lock, schedule or spawn time `at` was written: keep `#due` a lower bound, and tell idle
-- workers if they must learn of it (Q.note_timer's `slack`; false: a lease renewed, no news).
function Q.lower_due(queue, at, slack)
  local field = Q.mfield('due', queue)
  local cur = tonumber(rcall('HGET', K.config, field))
  if cur and at < cur then rcall('HSET', K.config, field, at) end
  if ctx.cfgv then ctx.cfgv[field] = nil end
  -- A known-empty mark (queuescan.lua) ends with a new timer; a renewed lease only moves one later.
  local marks = K.empty
  local m = marks and marks[queue]
  if m and (slack ~= false or at < m.due) then
    marks[queue] = nil
    K.mark_gen = (K.mark_gen or 0) + 1  -- (queuescan.lua, Q.first_open)
  end
  if slack ~= false then Q.note_timer(queue, at, slack) end
end

-- Decode a stored JSON list (tags/throttles); tolerate the {} quirk and garbage.
function Q.list(text)
  -- (the empty forms every job has skip cjson)
  if not text or text == '' or text == '{}' or text == '[]' then return {} end
  local ok, v = pcall(cjson_decode, text)
  if ok and type(v) == 'table' then return v end
  return {}
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

-- ---------------------------------------------------------------- tags index

-- Add/remove a job's membership in ql:t:<tag> and keep ql:tags counts honest.
function Q.tag_add(jid, tag, now)
  rcall('ZADD', KP .. 't:' .. tag, now, jid)
  rcall('ZINCRBY', K.tags, 1, tag)
end

function Q.tag_remove(jid, tag)
  rcall('ZREM', KP .. 't:' .. tag, jid)
  if tonumber(rcall('ZINCRBY', K.tags, -1, tag)) <= 0 then rcall('ZREM', K.tags, tag) end
end

-- Release a list in chunks with a command taking many members (ZREM, SREM, DEL...).
function Q.chunked(cmd, key, list)
  for i = 1, #list, Q.CHUNK do
    rcall(cmd, key, unpack(list, i, math.min(i + Q.CHUNK - 1, #list)))
  end
end

-- ---------------------------------------------------------------- failure bookkeeping

function Q.counter(queue, when, field, delta)
  rcall('HINCRBY', KP .. 's:stats:' .. Q.bin(when) .. ':' .. queue, field, delta)
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
  rcall('SADD', K.failures, group)
  rcall('LPUSH', KP .. 'f:' .. group, jid)
  Q.counter(queue, now, 'failures', 1)
  Q.counter(queue, now, 'failed', 1)
end

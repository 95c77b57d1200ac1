-- validate.lua: argument checks every command runs before its first write.
--
--@ helpers
--
-- Commands: none (helpers only). Keys: none. Each check raises `<Op>(): Arg "<name>" ...`
-- with qless-core's wording where it has one (the rules are listed in docs/engine.md).

-- ---------------------------------------------------------------- validation

-- Raise `<Op>(): text`; level 1 keeps the `user_script:N:` prefix clients strip.
function Q.fail(text)
  error(ctx.op .. '(): ' .. text)
end

-- True when s is plain decimal text: optional sign, digits with an optional fraction,
-- optional exponent. Rejects hex, spaces, nan, inf.
local function is_decimal(s)
  if type(s) ~= 'string' then return false end
  if s:find('^%-?%d+$') then return true end  -- plain integers (most arguments): one scan
  if s:find('^%d+%.%d+$') then return true end  -- plain fractions (every `now`): one more
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
  -- (a uuid4 jid, what most puts send, passes with one cheap class scan: hex has no '-')
  if #v == 32 and sfind(v, '^%x+$') then return v end
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

-- Queue names that passed Q.queue (a worker names up to 20 on every call); kept across calls
-- as a Redis 7 function, bounded.
local valid_queue, nvalid = {}, 0

function Q.queue(v, name)
  if valid_queue[v] then return v end
  name = name or 'queue'
  if v == nil or v == '' then Q.fail('Arg "' .. name .. '" missing') end
  if #v > 64 or not v:match('^[%w_%.%-]+$') then
    Q.fail('Arg "' .. name .. '" invalid: ' .. v)
  end
  if nvalid >= 1024 then valid_queue, nvalid = {}, 0 end
  valid_queue[v] = true
  nvalid = nvalid + 1
  return v
end

-- Worker names that passed Q.worker (a client sends its own on every call); kept across
-- calls as a Redis 7 function, bounded.
local valid_worker, nworker = {}, 0

function Q.worker(v, missing_op)
  if valid_worker[v] then return v end
  if v == nil or v == '' then
    if missing_op then error(missing_op .. '(): Arg "worker" missing') end
    Q.fail('Arg "worker" missing')
  end
  if #v > 128 or not v:match('^[\33-\57\59-\126]+$') then
    Q.fail('Arg "worker" invalid: ' .. v)
  end
  if nworker >= 1024 then valid_worker, nworker = {}, 0 end
  valid_worker[v] = true
  nworker = nworker + 1
  return v
end

-- Class names that passed Q.klass (a few names, sent on every put); bounded, as queue names.
local valid_klass, nklass = {}, 0

function Q.klass(v)
  if valid_klass[v] then return v end
  if v == nil or v == '' then Q.fail('Arg "klass" missing') end
  if #v > 256 or not printable(v) then Q.fail('Arg "klass" invalid') end
  if nklass >= 1024 then valid_klass, nklass = {}, 0 end
  valid_klass[v] = true
  nklass = nklass + 1
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
  -- (an object's text starts with `{`: a client's without the blanks JSON allows before it)
  if type(value) ~= 'table' or not (sbyte(v, 1) == 123 or v:find('^%s*{')) then
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

-- A JSON list of names, each passed to `check`, duplicates dropped (first kept).
local function name_list(name, v, maxn, check)
  local out, seen = {}, {}
  for _, t in ipairs(json_list(name, v, maxn)) do
    check(t)
    if not seen[t] then seen[t] = true; tinsert(out, t) end
  end
  return out
end

function Q.tags(v)
  if v == '[]' then return {} end  -- the common case: no decoding needed
  return name_list('tags', v, 50, Q.tag_name)
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
  return name_list('throttles', v, 10, Q.throttle_id)
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

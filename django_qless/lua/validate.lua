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

-- config.lua: configuration commands.
--
--@ command config.get
--@ command config.set
--@ command config.unset
--
-- Commands (after `now`):
--   config.get    [key]      -> value (bulk string, integer for defaults) or JSON of all
--   config.set    key value  -> nil
--   config.unset  key        -> nil
--
-- Keys:
--   ql:config   hash  option -> value (HGET, HGETALL, HSET, HDEL); fields starting with '#'
--               are the engine's bookkeeping: hidden from config.get, refused by set/unset
--   channel ql:log (config_set / config_unset events)


Q.mod.config = function()
  local rcall = Q.rcall
  local C = Q.commands


  -- Integer options and their bounds, inclusive (docs/engine.md, "Option bounds"). An upper
  -- bound keeps a lease, a retention or a cap within what an operator can mean: a heartbeat
  -- of 1e11 s would hand out a lock for millennia.
  local DAY = 86400
  local INT_RULES = {
    ['heartbeat'] = { 1, 7 * DAY }, ['grace-period'] = { 0, DAY },
    ['jobs-history'] = { 0, 3650 * DAY }, ['jobs-history-count'] = { 0, 100000000 },
    ['max-job-history'] = { 3, 10000 }, ['max-worker-age'] = { 1, 365 * DAY },
    ['stats-history'] = { 0, 3650 }, ['histogram-history'] = { 0, 3650 },
    ['lean-job-records'] = { 0, 1 },
  }
  local HEARTBEAT_RULE = INT_RULES['heartbeat']
  local CONCURRENCY_RULE = { 0, 1000000 }

  local function check_value(key, value)
    local rule = INT_RULES[key]
    if rule == nil then
      if key:match('%-heartbeat$') then rule = HEARTBEAT_RULE
      elseif key:match('%-max%-concurrency$') then rule = CONCURRENCY_RULE end
    end
    if rule == nil then
      if #value > 4096 then Q.fail('Arg "value" too long') end
      return value
    end
    local n = Q.number('value', value)
    local lo, hi = rule[1], rule[2]
    local zero = key == 'max-job-history' and n == 0  -- (0: unlimited)
    if n ~= math.floor(n) or ((n < lo or n > hi) and not zero) then
      Q.fail('Arg "value" for ' .. key .. ' must be an integer from ' .. lo .. ' to ' .. hi
        .. (key == 'max-job-history' and ' or 0' or '') .. ': ' .. value)
    end
    return value
  end

  local function config_key(v)
    if v == nil or v == '' then Q.fail('Arg "key" missing') end
    if #v > 256 or not Q.printable(v) or v:sub(1, 1) == '#' then Q.fail('Arg "key" invalid') end
    return v
  end

  C['config.get'] = { 'config.get', function(now, args)
    if args[1] == nil then
      local out = {}
      for k, v in pairs(Q.DEFAULTS) do out[k] = v end
      local all = rcall('HGETALL', K.config)
      for i = 1, #all, 2 do
        if all[i]:sub(1, 1) ~= '#' then out[all[i]] = all[i + 1] end
      end
      return cjson.encode(out)
    end
    local v = rcall('HGET', K.config, args[1])
    if v then return v end
    return Q.DEFAULTS[args[1]]
  end }

  C['config.set'] = { 'config.set', function(now, args)
    local key = config_key(args[1])
    local value = args[2]
    if value == nil then Q.fail('Arg "value" missing') end
    check_value(key, value)
    Q.publish(K.log, '{"option":' .. Q.js(key) .. ',"event":"config_set","value":'
      .. Q.js(value) .. '}')
    rcall('HSET', K.config, key, value)
  end }

  C['config.unset'] = { 'config.unset', function(now, args)
    local key = config_key(args[1])
    Q.publish(K.log, '{"event":"config_unset","option":' .. Q.js(key) .. '}')
    rcall('HDEL', K.config, key)
  end }
end

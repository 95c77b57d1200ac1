-- jobmeta.lua: reading a job and changing what it carries besides its state.
--
--@ command depends job lists
--@ command priority
--@ command log
--@ command tag lists
--@ command track objects
--@ command get objects
--@ command multiget objects
--
-- Commands (after `now`):
--   depends   jid on jid... | off jid...|all                        -> 1
--   priority  jid priority                                          -> priority
--   log       jid message [data JSON]                               -> nil
--   get       jid                                                   -> JSON job object | nil
--   multiget  jid...                                                -> JSON array
--   tag       add|remove jid tag... | get tag [offset] [count] | top [offset] [count] -> JSON
--   track     [track|untrack jid]                                   -> JSON | 1 | 0
--
-- Keys:
--   ql:j:<jid>                 hash  (HMGET, HSET, HDEL, EXISTS; fields priority, tags, tracked)
--   ql:j:<jid>-history         list  (RPUSH via Q.history; LRANGE via the objects loader)
--   ql:j:<jid>-dependencies    set   (SADD, SREM, SMEMBERS, SCARD, DEL)
--   ql:j:<jid>-dependents      set   (SADD, SREM, SMEMBERS)
--   ql:q:<queue>-work|depends|scheduled  zset (ZSCORE, ZADD, ZREM)
--   ql:t:<tag>, ql:tags        zset  (ZADD, ZREM, ZINCRBY, ZRANGE, ZCARD, ZREVRANGEBYSCORE)
--   ql:tracked                 zset  (ZADD, ZREM, ZRANGE)
--   channels: ql:log, ql:track, ql:untrack, ql:wake:<queue>

Q.mod.jobmeta = function()
  local rcall = Q.rcall
  local C = Q.commands


  C['depends'] = { 'Depends', function(now, args)
    local jid = Q.jid(args[1])
    local command = args[2]
    local targets
    if command == 'on' then
      targets = Q.jid_args(args, 3)
      for _, d in ipairs(targets) do
        if d == jid then Q.fail('Arg "depends" invalid: a job cannot depend on itself') end
      end
    elseif command == 'off' then
      if args[3] ~= 'all' then targets = Q.jid_args(args, 3) end
    else
      Q.fail('Argument "command" must be "on" or "off"')
    end
    local h = Q.read(jid, { 'state', 'queue', 'priority', 'scheduled' })
    if not h or h.state ~= 'depends' then
      Q.fail('Job ' .. jid .. ' not in the depends state: ' .. tostring(h and h.state or false))
    end
    if command == 'on' then
      Q.check_cycle(jid, targets)
      Q.add_deps(jid, targets)
      return 1
    end
    if not targets then targets = rcall('SMEMBERS', Q.kdeps(jid)) end
    for _, d in ipairs(targets) do
      rcall('SREM', Q.kdents(d), jid)
      rcall('SREM', Q.kdeps(jid), d)
    end
    if rcall('SCARD', Q.kdeps(jid)) == 0 and h.queue and h.queue ~= '' then
      rcall('DEL', Q.kdeps(jid))
      Q.undepend(jid, h, now)
    end
    return 1
  end }

  C['priority'] = { 'Priority', function(now, args)
    local jid = Q.jid(args[1])
    local priority = Q.priority(args[2], 'missing or not a number')
    local h = Q.read(jid, { 'queue', 'state' })
    if not h then Q.fail('Job ' .. jid .. ' does not exist') end
    -- A timed-out (stalled) job keeps its +inf score: it stays first in line.
    if h.queue and h.queue ~= '' and h.state ~= 'stalled' then
      local key = Q.kq(h.queue, 'work')
      if rcall('ZSCORE', key, jid) then rcall('ZADD', key, priority, jid) end
    end
    rcall('HSET', Q.kjob(jid), 'priority', priority)
    return priority
  end }

  C['log'] = { 'Log', function(now, args)
    local jid = Q.jid(args[1])
    local message = args[2]
    if message == nil or message == '' then Q.fail('Arg "message" missing') end
    message = Q.message(message)
    local extra
    if args[3] then
      Q.data(args[3])
      extra = cjson.decode(args[3])
      if next(extra) == nil then extra = nil end
    end
    local h = Q.read(jid, { 'state', 'history' })
    if not h then Q.fail('Job ' .. jid .. ' does not exist') end
    Q.history(jid, now, message, extra, h.history)
  end }

  C['get'] = { 'Get', function(now, args)
    local job = Q.get(Q.jid(args[1]))
    if job then return cjson.encode(job) end
    return nil
  end }

  C['multiget'] = { 'MultiGet', function(now, args)
    local out = {}
    for _, jid in ipairs(Q.jid_args(args, 1, true)) do
      local job = Q.get(jid)
      if job then table.insert(out, job) end
    end
    return cjson.encode(out)
  end }

  C['tag'] = { 'Tag', function(now, args)
    local command = args[1]
    if command == 'add' or command == 'remove' then
      local jid = Q.jid(args[2])
      local given = {}
      for i = 3, #args do table.insert(given, Q.tag_name(args[i])) end
      if #given > Q.MAX_LIST then Q.fail('at most ' .. Q.MAX_LIST .. ' tags') end
      local h = Q.read(jid, { 'state', 'tags' })
      if not h then Q.fail('Job ' .. jid .. ' does not exist') end
      local tags, have = Q.list(h.tags), {}
      for _, t in ipairs(tags) do have[t] = true end
      if command == 'add' then
        for _, t in ipairs(given) do
          if not have[t] then
            if #tags >= 50 then Q.fail('Arg "tags" has more than 50 entries') end
            have[t] = 'new'
            table.insert(tags, t)
          end
        end
        for _, t in ipairs(tags) do
          if have[t] == 'new' then Q.tag_add(jid, t, now) end
        end
      else
        local drop = {}
        for _, t in ipairs(given) do drop[t] = true end
        local kept = {}
        for _, t in ipairs(tags) do
          if drop[t] then Q.tag_remove(jid, t) else table.insert(kept, t) end
        end
        tags = kept
      end
      rcall('HSET', Q.kjob(jid), 'tags', cjson.encode(tags))
      return cjson.encode(tags)
    elseif command == 'get' then
      local tag = Q.tag_name(args[2])
      local offset = Q.offset('offset', args[3])
      local count = Q.count(args[4], 0, 500, 25)
      local jobs = {}
      if count > 0 then jobs = rcall('ZRANGE', KP .. 't:' .. tag, offset, offset + count - 1) end
      return cjson.encode({ total = rcall('ZCARD', KP .. 't:' .. tag), jobs = jobs })
    elseif command == 'top' then
      local offset = Q.offset('offset', args[2])
      local count = Q.count(args[3], 0, 500, 25)
      if count == 0 then return cjson.encode({}) end
      return cjson.encode(rcall('ZREVRANGEBYSCORE', K.tags, '+inf', 2, 'LIMIT', offset, count))
    end
    Q.fail('First argument must be "add", "remove" or "get"')
  end }

  C['track'] = { 'Track', function(now, args)
    if #args == 0 then
      local jobs, expired = {}, {}
      for _, jid in ipairs(rcall('ZRANGE', K.tracked, 0, -1)) do
        local h = Q.read(jid, Q.ALL)
        if h then
          table.insert(jobs, Q.job_object(jid, h, true, false))
        else
          table.insert(expired, jid)
        end
      end
      return cjson.encode({ jobs = jobs, expired = expired })
    end
    local action = string.lower(args[1])
    if action ~= 'track' and action ~= 'untrack' then
      Q.fail('Unknown action "' .. args[1] .. '"')
    end
    if args[2] == nil or args[2] == '' then Q.fail('Arg "jid" missing') end
    local jid = Q.jid(args[2])
    if rcall('EXISTS', Q.kjob(jid)) == 0 then Q.fail('Job does not exist') end
    if action == 'track' then
      Q.publish(K.track, jid)
      rcall('HSET', Q.kjob(jid), 'tracked', 1)
      return cjson.encode(rcall('ZADD', K.tracked, now, jid))
    end
    Q.publish(K.untrack, jid)
    rcall('HDEL', Q.kjob(jid), 'tracked')
    return cjson.encode(rcall('ZREM', K.tracked, jid))
  end }
end

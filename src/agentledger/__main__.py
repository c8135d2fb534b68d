from agentledger.entry import main

main()
